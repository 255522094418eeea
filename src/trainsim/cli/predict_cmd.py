"""``trainsim predict``: predict one training job."""

from __future__ import annotations

from typing import Any

import typer

from trainsim.cli import app
from trainsim.cli.job_options import job_from_options, with_job_options


@app.command("predict")
@with_job_options()
def predict_command(
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    engine: str = typer.Option("analytic", "--engine", help="analytic (closed form) or event (simulator)"),
    flops_convention: str = typer.Option("megatron", "--flops-convention", help="megatron or causal"),
    calibration: str | None = typer.Option(None, "--calibration", help="YAML file overriding fitted constants"),
    op_costs: list[str] = typer.Option([], "--op-costs", help="measured operator table(s) (trainsim profile)"),
    comm_costs: list[str] = typer.Option([], "--comm-costs", help="measured collective table(s) (nccl-tests)"),
    *,
    job_options: dict[str, Any],
) -> None:
    """Predict iteration time, throughput, MFU, memory per stage and (with --train-tokens) training time and cost."""
    from trainsim.errors import TrainsimError
    from trainsim.predictor import predict

    if flops_convention not in ("megatron", "causal"):
        raise TrainsimError("flops_convention", f"unknown convention {flops_convention!r}", "use megatron or causal")
    if engine not in ("analytic", "event"):
        raise TrainsimError("engine", f"unknown engine {engine!r}", "use analytic or event")
    job = job_from_options(job_options)
    calib = _load_calibration(calibration, job) if calibration else None
    cost_model = None
    if op_costs or comm_costs:
        from trainsim.cost.tables import measured_cost_model

        cost_model = measured_cost_model(job, op_tables=op_costs, comm_tables=comm_costs, calibration=calib)
    result = predict(job, engine=engine, calibration=calib, cost_model=cost_model,  # type: ignore[arg-type]
                     flops_convention=flops_convention)
    if json_out:
        from trainsim.cli.output import print_json

        print_json(result.to_json_dict())
    else:
        from trainsim.cli.report import print_prediction

        print_prediction(result)


def _load_calibration(path: str, job: Any) -> Any:
    from pathlib import Path

    import yaml

    from trainsim.cost.calibration import calibration_for, calibration_from_mapping
    from trainsim.errors import TrainsimError

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TrainsimError("calibration", f"cannot read {path} ({exc})".replace("\n", " "), "give a YAML file") from None
    if not isinstance(data, dict):
        raise TrainsimError("calibration", f"{path} is not a mapping", "map constant names to values")
    return calibration_from_mapping(data, calibration_for(job.system.gpu.generation))
