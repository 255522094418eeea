"""``trainsim whatif``: what-if straggler analysis of a training trace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

import typer

from trainsim.cli import app

if TYPE_CHECKING:
    from trainsim.whatif.idealize import Grouping, Statistic


@app.command("whatif")
def whatif_command(
    trace: Path = typer.Argument(..., help="trace-<J>.parquet (released schema) or a rich-schema parquet trace"),
    meta: Path | None = typer.Option(None, "--meta", help="meta-<J>.yaml; default: beside the trace"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
    out: Path | None = typer.Option(None, "--out", help="write result.json, CSV tables and heatmap.png here"),
    heatmap: Path | None = typer.Option(None, "--heatmap", help="write the worker-slowdown heatmap (PNG)"),
    timeline: Path | None = typer.Option(
        None, "--timeline", help="write the actual steps as a Chrome/Perfetto trace (JSON; .gz to compress)"
    ),
    ideal_timeline: Path | None = typer.Option(
        None, "--ideal-timeline", help="write the simulated ideal steps as a Chrome/Perfetto trace"
    ),
    timeline_steps: str | None = typer.Option(
        None, "--timeline-steps", help="steps on the timelines, e.g. '23,25-27' (default: all analysed steps)"
    ),
    steps: str | None = typer.Option(None, "--steps", help="analyse only these steps, e.g. '12,20-23'"),
    ideal_group: str = typer.Option(
        "optype", "--ideal-group", help="idealize per: optype | optype-stage | optype-chunk"
    ),
    compute_stat: str = typer.Option("mean", "--compute-stat", help="ideal compute time: mean | median | trimmed-mean"),
    comm_stat: str = typer.Option(
        "median", "--comm-stat", help="ideal communication time: median | mean | trimmed-mean"
    ),
    trim_fraction: float = typer.Option(0.1, "--trim-fraction", help="fraction cut at each end by trimmed-mean"),
    eps_ms: float = typer.Option(0.05, "--eps-ms", help="clock-skew tolerance (ms) for send/recv no-ops"),
    launch_threshold: float = typer.Option(
        1.03, "--launch-threshold", help="attribute launch delays when T(actual)/T(original) reaches this"
    ),
    html: Path | None = typer.Option(
        None, "--html", help="write the interactive SMon page (one self-contained HTML file)"
    ),
) -> None:
    """What-if straggler analysis: how much faster without stragglers, and who is to blame."""
    import json
    import os

    from trainsim.cli.output import check_outputs
    from trainsim.whatif import IdealizeConfig, WhatIf, analyze, parse_steps

    check_outputs({"--heatmap": heatmap, "--timeline": timeline, "--ideal-timeline": ideal_timeline, "--html": html},
                  {"--out": out})
    cfg = IdealizeConfig(
        # the options are plain strings; IdealizeConfig checks them against the allowed values
        group_by=cast("Grouping", ideal_group),
        compute_stat=cast("Statistic", compute_stat),
        comm_stat=cast("Statistic", comm_stat),
        trim_fraction=trim_fraction,
    )
    session = WhatIf(trace, meta, steps=parse_steps(steps) if steps else None, ideal=cfg, eps=eps_ms * 1e-3)
    result = analyze(session, launch_threshold=launch_threshold)
    tl_steps = parse_steps(timeline_steps) if timeline_steps else None
    written: list[Path] = []
    if out is not None:
        written += result.save(out)
    if heatmap is not None:
        result.write_heatmap(heatmap)
        written.append(heatmap)
    if timeline is not None:
        session.write_timeline(timeline, "actual", tl_steps)
        written.append(timeline)
    if ideal_timeline is not None:
        session.write_timeline(ideal_timeline, "ideal", tl_steps)
        written.append(ideal_timeline)
    if html is not None:
        from trainsim.report.whatif import write_whatif_report

        link = os.path.relpath(timeline, html.parent) if timeline is not None else None
        write_whatif_report(result, html, trace_name=str(trace), timeline_file=link)
        written.append(html)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    from rich.console import Console

    from trainsim.whatif.report import render

    console = Console()
    render(result, console)
    for p in written:
        console.print(f"wrote {p}")
