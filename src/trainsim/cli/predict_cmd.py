"""``trainsim predict``: predict one training job (analytic engine, or the event engine with timelines)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from trainsim.cli import app
from trainsim.cli.job_options import JobCommand, job_from_options, with_job_options

if TYPE_CHECKING:
    from trainsim.cli.megatron_args import MegatronArgs
    from trainsim.cli.shell_script import LaunchCommand

#: Value of ``--memory-timeline`` given without a file.
NO_FILE = "-"
OPTIONAL_VALUE_FLAGS = ("--memory-timeline",)
#: ``ctx.meta`` key of the Megatron flags given on the command line that are not options of ``predict``.
MEGATRON_META = "trainsim.megatron_flags"


class PredictCommand(JobCommand):
    """``predict`` with options whose value is optional (``--memory-timeline [FILE]``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        args = self._split_megatron(ctx, args)
        fixed: list[str] = []
        for i, arg in enumerate(args):
            fixed.append(arg)
            if arg in OPTIONAL_VALUE_FLAGS:
                nxt = args[i + 1] if i + 1 < len(args) else None
                if nxt is None or (nxt.startswith("-") and nxt != NO_FILE):
                    fixed.append(NO_FILE)
        return super().parse_args(ctx, fixed)

    def _split_megatron(self, ctx: Any, args: list[str]) -> list[str]:
        """Move Megatron-LM flags that are not options of this command (``--group-query-attention``, ``--lr 3e-4``
        ...) to ``ctx.meta[MEGATRON_META]`` for :mod:`trainsim.cli.megatron_args`: command lines paste as they are."""
        import difflib

        from trainsim.cli.megatron_args import CLI_MEGATRON_SPELLED, EXTRA_FLAGS, is_ignored

        known = {name for param in self.get_params(ctx) for name in (*param.opts, *param.secondary_opts)}
        known |= set(ctx.help_option_names)  # `trainsim predict --help` is help, not a Megatron flag
        kept: list[str] = []
        extra: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            name = arg.split("=", 1)[0]
            megatron = name in EXTRA_FLAGS or is_ignored(name) or name in CLI_MEGATRON_SPELLED
            typo = not megatron and difflib.get_close_matches(name, known, n=1, cutoff=0.85)
            if not arg.startswith("--") or (name in known and name not in CLI_MEGATRON_SPELLED) or arg == "--" \
                    or typo:
                kept.append(arg)  # a typo of one of our options: click names it with a suggestion
                continue
            extra.append(arg)
            takes = EXTRA_FLAGS[name][0] if name in EXTRA_FLAGS else True
            while takes and "=" not in arg and i < len(args) and not args[i].startswith("--"):
                extra.append(args[i])  # Megatron has no positional arguments: every value belongs to the flag
                i += 1
        ctx.meta[MEGATRON_META] = extra
        return kept


@app.command("predict", cls=PredictCommand)
@with_job_options()
def predict_command(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    megatron_args: str | None = typer.Option(
        None, "--megatron-args", metavar="FILE",
        help="a Megatron-LM launch script (or a file of its arguments): its flags set the job; flags given here win"),
    deepspeed_config: str | None = typer.Option(
        None, "--deepspeed-config", metavar="FILE",
        help="a DeepSpeed ds_config.json: its batch sizes, precision, ZeRO stage and CPU offloading set the job; "
             "flags given here (and --megatron-args) win"),
    engine: str = typer.Option("analytic", "--engine", help="analytic (closed form) or event (simulator)"),
    flops_convention: str = typer.Option("megatron", "--flops-convention", help="megatron or causal"),
    calibration: str | None = typer.Option(None, "--calibration", help="YAML file overriding fitted constants"),
    kernels: str = typer.Option("auto", "--kernels",
                                help="GEMM/attention kernel model: auto (measured H100 surface on Hopper, analytic "
                                     "elsewhere), measured or analytic"),
    op_costs: list[str] = typer.Option([], "--op-costs", help="measured operator table(s) (trainsim profile)"),
    comm_costs: list[str] = typer.Option([], "--comm-costs", help="measured collective table(s) (nccl-tests)"),
    trace: str | None = typer.Option(None, "--trace", help="event engine: write a Chrome/Perfetto trace (.json, .gz)"),
    trace_detail: str | None = typer.Option(None, "--trace-detail",
                                            help="event engine: auto (default), block or layer slices in the trace"),
    memory_timeline: str | None = typer.Option(
        None, "--memory-timeline", metavar="[FILE]",
        help="event engine: memory over time from activation lifetimes; peaks in the output, series to FILE "
             "(.json or .csv) when given"),
    slow_rank: list[str] = typer.Option([], "--slow-rank", metavar="RANK=FACTOR",
                                        help="event engine: that GPU computes FACTOR× slower (repeatable)"),
    slow_stage: list[str] = typer.Option([], "--slow-stage", metavar="STAGE=FACTOR",
                                         help="event engine: every GPU of a stage FACTOR× slower (repeatable)"),
    slow_link: list[str] = typer.Option([], "--slow-link", metavar="NODE=FACTOR",
                                        help="event engine: the node's NICs FACTOR× slower (repeatable)"),
    seq_len_cv: float | None = typer.Option(None, "--seq-len-cv",
                                            help="event engine: coefficient of variation of micro-batch sequence "
                                                 "lengths (e.g. 0.3)"),
    seed: int | None = typer.Option(None, "--seed", help="event engine: random seed of --seq-len-cv (default 0)"),
    steps: int | None = typer.Option(None, "--steps", help="event engine: training steps to simulate and export"),
    export_ops: str | None = typer.Option(None, "--export-ops", metavar="OPS.parquet",
                                          help="event engine: write the op trace (straggler-trace schema)"),
    export_meta: str | None = typer.Option(None, "--export-meta", metavar="META.yaml",
                                           help="metadata of --export-ops (default: meta-<J>.yaml beside it)"),
    html: str | None = typer.Option(None, "--html", metavar="FILE",
                                    help="write an interactive report (one self-contained HTML file)"),
    *,
    job_options: dict[str, Any],
) -> None:
    """Predict iteration time, throughput, MFU, memory per stage and (with --train-tokens) training time and cost.

    With --engine event the step is simulated task by task: per-stage busy/idle time, Chrome trace, memory timeline,
    stragglers and op-trace export.
    """
    from trainsim.errors import TrainsimError
    from trainsim.predictor import predict

    if flops_convention not in ("megatron", "causal"):
        raise TrainsimError("flops_convention", f"unknown convention {flops_convention!r}", "use megatron or causal")
    if engine not in ("analytic", "event"):
        raise TrainsimError("engine", f"unknown engine {engine!r}", "use analytic or event")
    from trainsim.cost.job_costs import KERNEL_MODELS

    if kernels not in KERNEL_MODELS:
        raise TrainsimError("kernels", f"unknown kernel model {kernels!r}", "use auto, measured or analytic")
    given = {
        "--trace": trace is not None, "--trace-detail": trace_detail is not None,
        "--memory-timeline": memory_timeline is not None, "--slow-rank": bool(slow_rank),
        "--slow-stage": bool(slow_stage), "--slow-link": bool(slow_link), "--seq-len-cv": seq_len_cv is not None,
        "--seed": seed is not None, "--steps": steps is not None, "--export-ops": export_ops is not None,
        "--export-meta": export_meta is not None,
    }
    used = [flag for flag, on in given.items() if on]
    if used and engine != "event":
        raise TrainsimError("engine", f"{', '.join(used)} need{'s' if len(used) == 1 else ''} the event engine",
                            "add --engine event")
    if trace_detail is not None and trace is None:
        raise TrainsimError("trace_detail", "only applies to --trace", "add --trace FILE.json or drop --trace-detail")
    if seed is not None and seq_len_cv is None:
        raise TrainsimError("seed", "only applies to --seq-len-cv", "add --seq-len-cv 0.3 or drop --seed")
    from trainsim.cli.output import check_outputs

    check_outputs({"--trace": trace, "--export-ops": export_ops, "--export-meta": export_meta,
                   "--memory-timeline": None if memory_timeline in (None, NO_FILE) else memory_timeline,
                   "--html": html})
    megatron = None
    inline = ctx.meta.get(MEGATRON_META) or []
    if megatron_args is not None or inline:
        from trainsim.cli.megatron_args import (
            apply_entry_point,
            check_entry_point,
            drop_given,
            merge_into_options,
            parse_megatron_args,
        )
        from trainsim.cli.shell_script import LaunchCommand, gpu_note, read_script

        script = read_script(megatron_args) if megatron_args is not None else LaunchCommand([], None)
        check_entry_point(script.entry)
        megatron = parse_megatron_args([*drop_given(script.args, job_options), *inline])
        apply_entry_point(megatron, script.entry)
        megatron.notes[:0] = script.notes
        if script.entry is not None and script.gpus is None and job_options.get("num_gpus") is not None:
            # the GPU count given to trainsim answers the note
            megatron.notes.remove(gpu_note(script.launcher))
        job_options = merge_into_options(job_options, megatron, script.gpus)
    from trainsim.cli.deepspeed_config import merge_deepspeed_into_options, parse_deepspeed_text, read_deepspeed_config

    ds_config = None
    if deepspeed_config is not None:
        ds_config = read_deepspeed_config(deepspeed_config)
    elif megatron is not None and (written := script_ds_config(megatron, script)) is not None:
        ds_config = parse_deepspeed_text(*written)
    elif megatron is not None and megatron.deepspeed_config is not None:
        named = Path(megatron.deepspeed_config)
        beside = Path(megatron_args).parent / named if megatron_args is not None else named
        found = next((p for p in (named, beside) if p.is_file()), None)
        if found is not None:
            ds_config = read_deepspeed_config(str(found))
        else:
            megatron.notes.append(f"--deepspeed_config {named}: not found and not written by the script, so its ZeRO "
                                  "stage, precision and batch are not read (give --deepspeed-config FILE)")
    if ds_config is not None:
        if megatron is not None and job_options.get("framework") is None:
            job_options = {**job_options, "framework": "megatron-deepspeed"}  # a Megatron script with a DS config
        job_options = merge_deepspeed_into_options(job_options, ds_config)
    try:
        job = job_from_options(job_options)
    except TrainsimError as exc:
        unstated = megatron is not None and gpu_note(script.launcher) in megatron.notes
        if not unstated:
            raise
        # the GPU count defaulted to one model replica because the script does not state it: say so in the error
        raise TrainsimError(exc.field, exc.message, f"{exc.hint + '; ' if exc.hint else ''}the launch script does "
                            "not state its GPU count: give -n GPUS") from None
    if megatron is not None:
        from trainsim.cli.megatron_args import apply_to_job

        job = apply_to_job(job, megatron)
    calib = _load_calibration(calibration, job) if calibration else None
    cost_model = None
    if op_costs or comm_costs:
        from trainsim.cost.tables import measured_cost_model

        cost_model = measured_cost_model(job, op_tables=op_costs, comm_tables=comm_costs, calibration=calib,
                                         kernels=kernels)
    options: dict[str, Any] = {}
    if engine == "event":
        options = {
            "slow_rank": slow_rank or None, "slow_stage": slow_stage or None, "slow_link": slow_link or None,
            "seq_len_cv": seq_len_cv or 0.0, "seed": 0 if seed is None else seed,
            "steps": 1 if steps is None else steps, "trace": trace, "trace_detail": trace_detail or "auto",
            "export_ops": export_ops, "export_meta": export_meta,
        }
        if memory_timeline is not None:
            options["memory_timeline"] = True if memory_timeline == NO_FILE else memory_timeline
    from trainsim.cli.progress import activity

    with activity(f"{engine} engine", enabled=engine == "event"):
        result = predict(job, engine=engine, calibration=calib, cost_model=cost_model,  # type: ignore[arg-type]
                         flops_convention=flops_convention, kernels="auto" if cost_model else kernels, **options)
    notes = megatron.all_notes() if megatron is not None else []
    if ds_config is not None:
        notes += [f"deepspeed config: {n}" for n in ds_config.notes]
        if ds_config.ignored:
            notes.append(f"deepspeed config: ignored (no effect on time or memory, or not modelled): "
                         f"{', '.join(ds_config.ignored)}")
    if html is not None:
        import os

        from trainsim.report.predict import write_predict_report

        link = os.path.relpath(trace, os.path.dirname(os.path.abspath(html))) if trace else None
        write_predict_report(result, html, trace_file=link)
    if json_out:
        from trainsim.cli.output import print_json

        data = result.to_json_dict()
        if megatron is not None:
            data["megatron_args"] = {"file": megatron_args, "ignored": sorted(set(megatron.ignored)),
                                     "unrecognised": sorted(set(megatron.unrecognised)), "notes": notes}
        if ds_config is not None:
            data["deepspeed_config"] = {"file": deepspeed_config, "options": ds_config.options,
                                        "ignored": ds_config.ignored, "notes": ds_config.notes}
        print_json(data)
    else:
        from trainsim.cli.report import print_prediction

        print_prediction(result)
        for note in notes:
            print(f"note: {note}")
        if engine == "event":
            print_event_extras(result.to_json_dict())
        if html is not None:
            print(f"report written to {html}")


def print_event_extras(d: dict[str, Any]) -> None:
    """Readable rendering of the event engine's extra fields."""
    from rich.console import Console
    from rich.table import Table

    from trainsim.cli.output import fmt_bytes, fmt_seconds

    console = Console()
    rows = d.get("stage_busy_idle") or []
    if rows:
        t = Table(title="per stage (critical replica): busy and idle", title_justify="left")
        for col in ("stage", "busy", "idle", "compute", "exposed comm", "pp wait", "dp wait", "bubble"):
            t.add_column(col, justify="right")
        shown: list[dict[str, Any] | None] = list(rows) if len(rows) <= 12 else [*rows[:4], None, *rows[-4:]]
        for r in shown:
            if r is None:
                t.add_row("…", "", "", "", "", "", "", "")
                continue
            t.add_row(str(r["stage"]), fmt_seconds(r["busy_s"]), fmt_seconds(r["idle_s"]),
                      fmt_seconds(r["compute_s"]), fmt_seconds(r["comm_exposed_s"]), fmt_seconds(r["pp_wait_s"]),
                      fmt_seconds(r["dp_wait_s"]), fmt_seconds(r["bubble_s"]))
        console.print(t)
    info = d.get("engine_info") or {}
    if info:
        console.print(f"event engine: {info['tasks']:,} tasks, {info['replica_classes']} replica class(es), "
                      f"{info['simulated_steps']} simulated step(s), {info['fixed_point_iterations']} timing "
                      f"round(s), p2p {info['p2p_mode']}")
    if "step_times_s" in d:
        times = d["step_times_s"]
        console.print(f"step times: {', '.join(fmt_seconds(x) for x in times[:8])}"
                      + (" …" if len(times) > 8 else ""))
    st = d.get("stragglers")
    if st:
        base = fmt_seconds(st["baseline_iteration_time_s"])
        console.print(f"stragglers: {fmt_seconds(d['iteration_time_s'])} vs {base} without them: "
                      f"{st['slowdown']:.3f}× slower")
    mem = d.get("memory_timeline")
    if mem:
        t = Table(title="memory timeline (per GPU, from activation lifetimes)", title_justify="left")
        for col in ("stage", "peak", "analytic peak", "difference", "at"):
            t.add_column(col, justify="right")
        stages = mem["stages"]
        shown_m: list[dict[str, Any] | None] = list(stages) if len(stages) <= 12 else [*stages[:4], None,
                                                                                      *stages[-4:]]
        for r in shown_m:
            if r is None:
                t.add_row("…", "", "", "", "")
                continue
            t.add_row(str(r["stage"]), fmt_bytes(r["peak_bytes"]), fmt_bytes(r["analytic_peak_bytes"]),
                      f"{r['difference_bytes'] / 1e9:+.3f} GB", fmt_seconds(r["peak_time_s"]))
        console.print(t)
        if "file" in mem:
            console.print(f"memory timeline written to {mem['file']}")
    if "trace" in d:
        tr = d["trace"]
        console.print(f"trace written to {tr['file']} ({tr['events']:,} events, {tr['detail']} detail)")
    if "op_trace" in d:
        op = d["op_trace"]
        console.print(f"op trace written to {op['trace']} and {op['meta']} ({op['rows']:,} operations, "
                      f"{op['steps']} step(s)); analyse it with: trainsim whatif {op['trace']} --meta {op['meta']}")


def _load_calibration(path: str, job: Any) -> Any:
    from pathlib import Path

    import yaml

    from trainsim.cost.calibration import calibration_for, calibration_from_mapping
    from trainsim.errors import TrainsimError

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        message = f"cannot read {path} ({exc})".replace("\n", " ")
        raise TrainsimError("calibration", message, "give a YAML file") from None
    if not isinstance(data, dict):
        raise TrainsimError("calibration", f"{path} is not a mapping", "map constant names to values")
    return calibration_from_mapping(data, calibration_for(job.system.gpu.generation))


def script_ds_config(megatron: MegatronArgs, script: LaunchCommand) -> tuple[str, str] | None:
    """``(name, text)`` of the DeepSpeed config a launch script writes itself (``cat <<EOT > $config_json``) and
    passes with ``--deepspeed_config``, when it does."""
    name = megatron.deepspeed_config
    if name is None or name not in script.files:
        return None
    return name, script.files[name]
