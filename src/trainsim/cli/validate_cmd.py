"""``trainsim validate`` and ``trainsim calibrate``: accuracy against published measurements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from trainsim.cli import app
from trainsim.io.atomic import write_text_atomic

if TYPE_CHECKING:
    from trainsim.validation.report import ValidationReport


def _pct(x: float) -> str:
    return "—" if x != x else f"{x:.1%}"  # NaN when there is nothing to report


def _num(x: float) -> str:
    return "—" if x != x else f"{x:.2f}"


def _print_summary(report) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    from trainsim.validation.report import SOURCE_NAMES

    console = Console()
    for by, keys in (("source", report.sources()), ("framework", report.frameworks())):
        t = Table(title=f"predicted vs measured iteration time, per {by}", title_justify="left")
        for col in (by, "rows", "MAPE", "max |error|", "held-out MAPE", "Spearman", "top-1 regret"):
            t.add_column(col, justify="left" if col == by else "right")
        for k in keys:
            kw = {by: k}
            n = sum(1 for r in report.rows if getattr(r, by) == k)
            t.add_row(SOURCE_NAMES.get(k, k) if by == "source" else k, str(n), _pct(report.mape(**kw)),
                      _pct(report.max_error(**kw)), _pct(report.mape(held_out=True, **kw)),
                      _num(report.spearman(**kw)), _pct(report.regret(**kw)))
        t.add_row("all", str(len(report.rows)), _pct(report.mape()), _pct(report.max_error()),
                  _pct(report.mape(held_out=True)), _num(report.spearman()), _pct(report.regret()))
        console.print(t)
    for r in report.unfit():
        print(f"predicted not to fit in memory although it ran: {r.id} ({r.peak_memory_gb:.0f} GB)")
    for s in report.skipped:
        print(f"not predicted: {s.id}: {s.reason}")


def _clean(x: Any) -> Any:
    """NaN (nothing to report) as JSON null."""
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _json(report: ValidationReport) -> dict[str, Any]:
    return {k: _clean(v) for k, v in _json_raw(report).items()}


def _json_raw(report: ValidationReport) -> dict[str, Any]:
    return {
        "mape": report.mape(),
        "max_abs_error": report.max_error(),
        "held_out_mape": report.mape(held_out=True),
        "per_source": {s: {"mape": report.mape(s), "max_abs_error": report.max_error(s),
                           "held_out_mape": report.mape(s, held_out=True), "spearman": report.spearman(s),
                           "top1_regret": report.regret(s)} for s in report.sources()},
        "per_framework": {f: {"mape": report.mape(framework=f), "max_abs_error": report.max_error(framework=f),
                              "held_out_mape": report.mape(held_out=True, framework=f),
                              "spearman": report.spearman(framework=f), "top1_regret": report.regret(framework=f)}
                          for f in report.frameworks()},
        "calibration": {g: c.as_dict() for g, c in report.calibrations.items()},
        "rows": [{"id": r.id, "source": r.source, "measured_s": r.measured_s, "predicted_s": r.predicted_s,
                  "error": r.error, "held_out_error": r.held_out_error, "mfu": r.mfu, "fits": r.fits,
                  "framework": r.framework, "peak_memory_gb": r.peak_memory_gb, "tight": r.tight,
                  "measured_memory_gb": r.measured_memory_gb, "memory_error": r.memory_error,
                  "assumptions": list(r.assumptions)}
                 for r in report.rows],
        "not_predicted": [{"id": s.id, "source": s.source, "reason": s.reason} for s in report.skipped],
        "measurements": report.measurements_path,
    }


@app.command("validate")
def validate_command(
    write: Path | None = typer.Option(None, "--write", help="write the Markdown report (e.g. docs/VALIDATION.md)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    held_out: bool | None = typer.Option(None, "--held-out/--no-held-out",
                                         help="leave-one-source-out refits (packaged measurements only; default on)"),
    measurements: Path | None = typer.Option(
        None, "--measurements", help="CSV or Parquet file in the schema of the published table (default: the "
                                     "packaged one); predicted with the shipped constants, never fitted on"),
) -> None:
    """Predict every published measurement (or a file of your own) and report the error per source."""
    from trainsim.cli.output import check_outputs
    from trainsim.validation.report import render_markdown, run_validation

    check_outputs({"--write": write})
    from trainsim.cli.progress import counted

    with counted("validate") as tick:
        report = run_validation(refit=False, held_out=held_out, progress=tick, measurements=measurements)
    if write:
        write_text_atomic(write, render_markdown(report))
    if json_out:
        from trainsim.cli.output import print_json

        print_json(_json(report))
    else:
        _print_summary(report)
        if write:
            print(f"wrote {write}")


@app.command("calibrate")
def calibrate_command(
    out: Path | None = typer.Option(None, "--out", help="calibration YAML to write (default: the packaged one)"),
    write: Path | None = typer.Option(None, "--write", help="also write the Markdown report"),
) -> None:
    """Refit the analytic constants on the published measurements, write them, and report the error."""
    from importlib import resources

    from trainsim.cli.output import check_outputs
    from trainsim.cost import calibration as calibration_module
    from trainsim.validation.report import render_markdown, run_validation, write_calibration

    check_outputs({"--out": out, "--write": write})
    from trainsim.cli.progress import counted

    with counted("calibrate") as tick:
        report = run_validation(refit=True, held_out=write is not None, progress=tick)
    target = out or Path(str(resources.files("trainsim") / "presets" / calibration_module.CALIBRATION_FILE))
    write_calibration(report, target)
    calibration_module._load.cache_clear()
    print(f"wrote {target}")
    if write:
        write_text_atomic(write, render_markdown(report))
        print(f"wrote {write}")
    _print_summary(report)
