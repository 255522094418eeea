"""``trainsim search``: the best parallelization plans for a model on a system."""

from __future__ import annotations

from typing import Any

import typer

from trainsim.cli import app
from trainsim.cli.job_options import JobCommand, with_job_options


@app.command("search", cls=JobCommand)
@with_job_options(as_text=True)
def search_command(
    ctx: typer.Context,
    objective: str | None = typer.Option(
        None, "--objective", help="time | training-time | cost | gpus (default: cost with --deadline-days, else time)"),
    deadline_days: float | None = typer.Option(None, "--deadline-days", help="rank only plans that finish in time"),
    top: int = typer.Option(10, "--top", help="how many ranked plans to show (0: all)"),
    include_unfit: bool = typer.Option(False, "--all", help="also rank plans that do not fit in GPU memory"),
    others: str = typer.Option(
        "open", "--others", help="dimensions not given: open (search all valid values) or default (predict's)"),
    sp: str | None = typer.Option(None, "--sp", help="sequence parallelism: true, false or all"),
    backend: str = typer.Option("local", "--backend", help="local (process pool) or ray"),
    workers: int | None = typer.Option(None, "--workers", help="worker processes (default: all CPUs)"),
    refine: int = typer.Option(0, "--refine", help="re-predict the best K with the event engine"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    csv: str | None = typer.Option(None, "--csv", help="write every evaluated candidate to this CSV file"),
    parquet: str | None = typer.Option(None, "--parquet", help="write every evaluated candidate to this Parquet file"),
    plot: str | None = typer.Option(None, "--plot", help="write the design-space plot (PNG)"),
    plot_x: str | None = typer.Option(None, "--plot-x", help="plot x axis: gpus, cost or memory"),
    plot_color: str = typer.Option("tp", "--plot-color", help="colour points by this dimension"),
    calibration: str | None = typer.Option(None, "--calibration", help="YAML file overriding fitted constants"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar"),
    html: str | None = typer.Option(None, "--html", metavar="FILE",
                                    help="write an interactive report (one self-contained HTML file)"),
    *,
    job_options: dict[str, Any],
) -> None:
    """Search parallelization plans: every search flag takes a value, a list (--tp 4,8,16), a range
    (--num-gpus 512:4096:512, or 256..2048 doubling) or 'all'; flags not given are searched too (--others open)."""
    from trainsim.cli.search_options import load_calibration, space_from_options
    from trainsim.errors import TrainsimError
    from trainsim.search import search

    if top < 0:
        raise TrainsimError("top", f"must be 0 or more (got {top})", "give --top K (0: all)")
    from trainsim.cli.output import check_outputs

    csv = csv and _suffixed(csv, ".csv", "--csv", (".csv",))
    parquet = parquet and _suffixed(parquet, ".parquet", "--parquet", (".parquet", ".pq"))
    check_outputs({"--csv": csv, "--parquet": parquet, "--plot": plot, "--html": html})
    space = space_from_options(given_options(ctx, job_options), others=others, sp=sp)
    calib = load_calibration(calibration, space.system.gpu.generation) if calibration else None
    price = job_options.get("price_per_gpu_hour")
    from rich.console import Console

    from trainsim.cli.progress import counted

    err = Console(stderr=True)
    phases = {"analytic": "analytic estimates", "event": "event-engine refinement"}
    with counted("search", enabled=not no_progress) as tick:
        result = search(space, objective=objective, deadline_days=deadline_days, include_unfit=include_unfit,
                        refine=refine, backend=backend, workers=workers,
                        price_per_gpu_hour=float(price) if price is not None else None, calibration=calib,
                        progress=lambda phase, done, total: tick(done, total, phases.get(phase, phase)))
    for message, count in result.warnings.items():
        err.print(f"warning: {message} ({count:,} candidates)", highlight=False, markup=False, soft_wrap=True)
    written = []
    if csv:
        written.append(result.write(csv, top))
    if parquet:
        written.append(result.write(parquet, top))
    if plot:
        result.plot(plot, x=plot_x, color=plot_color)
        written.append(plot)
    if html:
        from trainsim.report.search import write_search_report

        title = f"Plan search: {space.model.name} on {space.system.name}"
        written.append(write_search_report(result, html, title=title))
    if json_out:
        from trainsim.cli.output import print_json

        print_json(result.to_json_dict(top))
        for path in written:
            err.print(f"wrote {path}", highlight=False, markup=False)
        return
    from trainsim.search.report import print_search

    out = Console()
    print_search(result, out, top=top)
    for path in written:
        out.print(f"wrote {path}", highlight=False, markup=False)


def given_options(ctx: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Job flags with the ones left at their default (e.g. --micro-batch-size 1) set to None: not given."""
    out = dict(values)
    for name in values:
        source = ctx.get_parameter_source(name) if ctx is not None else None
        if source is not None and source.name == "DEFAULT":
            out[name] = None if not isinstance(values[name], bool) else False
    return out


def _suffixed(path: str, suffix: str, flag: str, allowed: tuple[str, ...]) -> str:
    """``path`` with ``suffix`` added when it has none; another file type is an error."""
    from pathlib import Path

    from trainsim.errors import TrainsimError

    p = Path(path)
    if not p.suffix:
        return str(p.with_suffix(suffix))
    if p.suffix.lower() not in allowed:
        raise TrainsimError(flag, f"{p.name!r} is not a {suffix} file", f"give a file name ending in {suffix}")
    return str(p)
