"""``trainsim cluster ...``: multi-tenant GPU cluster scheduling with plan-aware throughput."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from trainsim.cli import app

cluster_app = typer.Typer(help="Multi-tenant GPU cluster scheduling with plan-aware throughput.",
                          no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                          rich_markup_mode=None)
trace_app = typer.Typer(help="Generate or import job traces.", no_args_is_help=True, add_completion=False,
                        pretty_exceptions_enable=False, rich_markup_mode=None)
casestudy_app = typer.Typer(help="Reproduce published case studies.", no_args_is_help=True, add_completion=False,
                            pretty_exceptions_enable=False, rich_markup_mode=None)
cluster_app.add_typer(trace_app, name="trace")
cluster_app.add_typer(casestudy_app, name="casestudy")
app.add_typer(cluster_app, name="cluster")


def _cluster_spec(cluster: str, failures: str | None, stragglers: str | None) -> Any:
    from trainsim.cluster.spec import load_cluster, parse_failures, parse_stragglers

    spec = load_cluster(cluster)
    changes: dict[str, Any] = {}
    if failures:
        changes["failures"] = parse_failures(failures)
    if stragglers:
        changes["stragglers"] = parse_stragglers(stragglers)
    return spec.model_copy(update=changes) if changes else spec


def _framework(name: str) -> str:
    """A ``--framework`` value, checked (one-line error naming the flag)."""
    from trainsim.cluster.predictor_adapter import framework_of
    from trainsim.errors import TrainsimError

    try:
        framework_of(name)
    except TrainsimError as exc:
        raise TrainsimError("--framework", exc.message, exc.hint) from None
    return name


def _overhead(kind: str, storage_gbps: float, restart_s: float) -> Any:
    from trainsim.cluster.throughput import OverheadModel
    from trainsim.errors import TrainsimError

    if storage_gbps <= 0:
        raise TrainsimError("--storage-gbps", "must be positive", "give the checkpoint storage bandwidth in GB/s")
    return OverheadModel(kind=kind, storage_bandwidth=storage_gbps * 1e9, restart_s=restart_s)


class _Progress:
    """A rich progress bar on stderr, shown only after a few seconds (long runs)."""

    def __init__(self, enabled: bool) -> None:
        import time

        self.enabled = enabled and sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        import time

        if self.bar is None:
            if time.perf_counter() - self.t0 < 2.0:
                return
            from rich.progress import Progress

            self.bar = Progress(transient=True)
            self.bar.start()
            self.task = self.bar.add_task("simulating jobs", total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@cluster_app.command("run")
def run_command(
    trace: Path = typer.Option(..., "--trace", "-t", help="job trace (CSV or Parquet)"),
    cluster: str = typer.Option("dgx-a100:128", "--cluster", "-c", help="cluster YAML or SYSTEM:NODES"),
    policy: str = typer.Option("fifo", "--policy", "-p", help="scheduling policy (see docs/cluster.md)"),
    throughput: str = typer.Option("best", "--throughput", help="best, dp-only, fixed or table:DIR"),
    search_space: str = typer.Option("tdp", "--search-space", help="tdp (vTrain's t, d, p) or full"),
    framework: str | None = typer.Option(None, "--framework",
                                         help="software stack of jobs without a framework column (e.g. "
                                              "megatron-lm-2021; default megatron-core)"),
    seed: int = typer.Option(0, "--seed", help="seed of the failure and straggler substreams"),
    failures: str | None = typer.Option(None, "--failures", help="node_mtbf_h=H[,repair_h=R,restart_s=S]"),
    stragglers: str | None = typer.Option(None, "--stragglers",
                                          help="rate_per_node_day=R[,slowdown=X,duration_h=D]"),
    resize_overhead: str = typer.Option("checkpoint", "--resize-overhead", help="checkpoint, constant or none"),
    storage_gbps: float = typer.Option(10.0, "--storage-gbps", help="checkpoint storage bandwidth (GB/s)"),
    restart_s: float = typer.Option(30.0, "--restart-s", help="fixed seconds per restart"),
    until_h: float | None = typer.Option(None, "--until-h", help="stop the simulation after this many hours"),
    out: Path | None = typer.Option(None, "--out", "-o", help="directory for jobs.csv, allocations.parquet, ..."),
    report: Path | None = typer.Option(None, "--report", help="self-contained HTML report"),
    no_plots: bool = typer.Option(False, "--no-plots", help="skip the PNG plots in --out"),
    workers: int | None = typer.Option(None, "--workers", help="processes that precompute throughput curves"),
    json_out: bool = typer.Option(False, "--json", help="print the metrics as one JSON object"),
) -> None:
    """Simulate a trace on a cluster under a policy."""
    from trainsim.cluster import run
    from trainsim.cluster.outputs import allocations_frame, clean_json, jobs_frame, metrics, write_outputs
    from trainsim.io.atomic import check_output_path

    if out is not None:
        check_output_path(out, "--out", directory=True)
    if report is not None:
        check_output_path(report, "--report")
        _report_writer()
    spec = _cluster_spec(cluster, failures, stragglers)
    from trainsim.cluster.throughput import ThroughputModel

    tm = ThroughputModel.parse(throughput, search_space, framework)
    if workers is not None and workers > 1:
        from trainsim.cluster.parallel import precompute

        precompute(trace, spec, tm, workers)
    bar = _Progress(not json_out)
    try:
        res = run(trace, spec, policy=policy, throughput=tm, overhead=_overhead(resize_overhead, storage_gbps,
                                                                                 restart_s),
                  seed=seed, until_s=until_h * 3600.0 if until_h is not None else None, progress=bar)
    finally:
        bar.close()
    alloc = allocations_frame(res)
    jobs = jobs_frame(res, alloc)
    mets = metrics(res, jobs, alloc)
    if out is not None:
        write_outputs(out, jobs, alloc, mets, plots=not no_plots)
    if report is not None:
        _report_writer()(jobs, alloc, mets, report)
    if json_out:
        from trainsim.cli.output import print_json

        print_json(clean_json(mets))
        return
    _print_metrics(mets)


def _report_writer() -> Any:
    from trainsim.errors import TrainsimError

    try:
        from trainsim.report.cluster import write_cluster_report  # type: ignore[import-not-found]
    except ImportError:
        raise TrainsimError("--report", "the cluster HTML report (trainsim.report.cluster) is not installed yet",
                            "use --out DIR for tables and PNG plots") from None
    return write_cluster_report


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if unit == "h":
        return f"{v / 3600:.2f} h"
    if unit == "%":
        return f"{100 * v:.1f} %"
    return f"{v:,.4g}" if isinstance(v, float) else str(v)


def _print_metrics(m: dict[str, Any]) -> None:
    lines = [
        f"policy {m['policy']}, throughput {m['throughput']}: {m['n_finished']}/{m['n_jobs']} jobs finished, "
        f"{m['n_rejected']} rejected",
        f"deadlines met: {_fmt(m['dsr'], '%')} ({m['n_met']}/{m['n_with_deadline']})",
        f"JCT mean {_fmt(m['jct_mean_s'], 'h')}, p50 {_fmt(m['jct_p50_s'], 'h')}, p95 {_fmt(m['jct_p95_s'], 'h')}, "
        f"p99 {_fmt(m['jct_p99_s'], 'h')}; queue mean {_fmt(m['queue_mean_s'], 'h')}",
        f"makespan {_fmt(m['makespan_s'], 'h')}; GPU utilisation {_fmt(m['gpu_util'], '%')}, "
        f"goodput (MFU) {_fmt(m['goodput_util'], '%')}",
        f"cost ${m['cost_usd']:,.0f}; {m['restarts']} restarts, {m['lost_gpu_hours']:,.1f} GPU-hours lost",
    ]
    print("\n".join(lines))


@cluster_app.command("curves")
def curves_command(
    model: str = typer.Option(..., "--model", "-m", help="model preset or config file"),
    system: str = typer.Option("dgx-a100", "--system", "-s", help="system preset or YAML"),
    gbs: int = typer.Option(..., "--gbs", "--global-batch-size", help="global batch (sequences)"),
    gpus: str = typer.Option(..., "--gpus", help="N (powers of two up to N) or N:M (powers of two from N to M)"),
    seq_length: int | None = typer.Option(None, "--seq-length", help="sequence length (default: the model's)"),
    source: str = typer.Option("best", "--source", help="best or dp-only"),
    search_space: str = typer.Option("tdp", "--search-space", help="tdp or full"),
    framework: str | None = typer.Option(None, "--framework", help="software stack (default megatron-core)"),
    fmt: str = typer.Option("table", "--format", help="table, json, csv or elasticflow"),
    json_out: bool = typer.Option(False, "--json", help="same as --format json"),
) -> None:
    """Iteration time over GPU counts for one job (the throughput curve a scheduler sees)."""
    from trainsim.cluster.curves import curve_records, format_curve

    recs = curve_records(model, system, gbs, gpus, seq_length, source, search_space, framework)
    print(format_curve(recs, "json" if json_out else fmt, model, gbs), end="")


@trace_app.command("vtrain2")
def trace_vtrain2(
    itp: Path = typer.Option(..., "--itp", help="ITP cluster CSV (raw or ElasticFlow's)"),
    jobs: int = typer.Option(..., "--jobs", "-k", help="consecutive arrivals to sample"),
    seed: int = typer.Option(0, "--seed", help="seed of the trace substream"),
    output: Path = typer.Option(..., "--output", "-o", help="trace file (.csv or .parquet)"),
    cluster: str = typer.Option("dgx-a100:128", "--cluster", "-c", help="cluster the trace is sized for"),
    no_deadlines: bool = typer.Option(False, "--no-deadlines", help="leave deadlines out (JCT traces)"),
    all_at_once: bool = typer.Option(False, "--all-at-once", help="submit every job at t=0 (makespan traces)"),
    gpu_scale: int = typer.Option(8, "--gpu-scale", help="GPUs per ITP GPU"),
    reference: str = typer.Option("dp-only", "--reference", help="throughput that turns durations into iterations"),
    framework: str = typer.Option("megatron-lm-2021", "--framework",
                                  help="the jobs' software stack, written on every row ('none': no column)"),
    time_scale: float = typer.Option(1.0, "--time-scale", help="stretch ITP durations and arrival gaps alike"),
) -> None:
    """vTrain's case-study recipe on ITP arrivals."""
    from trainsim.cluster.generators import vtrain2
    from trainsim.cluster.trace import write_trace
    from trainsim.io.atomic import check_output_path

    check_output_path(output, "--output")
    fw = None if framework == "none" else _framework(framework)
    df = vtrain2(itp, jobs, seed, cluster, deadlines=not no_deadlines, all_at_once=all_at_once,
                 gpu_scale=gpu_scale, reference=reference, framework=fw, time_scale=time_scale)
    write_trace(df, output)
    print(f"wrote {len(df)} jobs to {output}")


@trace_app.command("poisson")
def trace_poisson(
    itp_sizes: Path = typer.Option(..., "--itp-sizes", help="ITP CSV whose GPU counts and durations are sampled"),
    jobs: int = typer.Option(..., "--jobs", "-n", help="number of jobs"),
    models: str = typer.Option(..., "--models", help="comma-separated model presets"),
    seed: int = typer.Option(0, "--seed", help="seed of the trace substream"),
    output: Path = typer.Option(..., "--output", "-o", help="trace file (.csv or .parquet)"),
    mean_interarrival_s: float = typer.Option(600.0, "--mean-interarrival-s", help="mean gap between arrivals"),
    cluster: str = typer.Option("dgx-a100:128", "--cluster", "-c", help="cluster the trace is sized for"),
    no_deadlines: bool = typer.Option(False, "--no-deadlines", help="leave deadlines out"),
    framework: str | None = typer.Option(None, "--framework", help="software stack written on every row"),
) -> None:
    """Poisson arrivals with ITP job sizes."""
    from trainsim.cluster.generators import poisson
    from trainsim.cluster.trace import write_trace
    from trainsim.io.atomic import check_output_path

    check_output_path(output, "--output")
    df = poisson(itp_sizes, jobs, [m.strip() for m in models.split(",") if m.strip()], seed,
                 mean_interarrival_s=mean_interarrival_s, cluster=cluster, deadlines=not no_deadlines,
                 framework=None if framework is None else _framework(framework))
    write_trace(df, output)
    print(f"wrote {len(df)} jobs to {output}")


@trace_app.command("import")
def trace_import(
    source: Path = typer.Argument(..., help="trace file in a foreign format"),
    fmt: str = typer.Option(..., "--format", help="elasticflow, philly, helios or acme"),
    output: Path = typer.Option(..., "--output", "-o", help="trace file (.csv or .parquet)"),
    mapping: list[str] = typer.Option([], "--map", metavar="NAME=PRESET",
                                      help="model mapping (repeatable; '*=PRESET' for every other name)"),
    default_model: str = typer.Option("gpt3-1.7b", "--default-model", help="model of formats without one"),
    gbs: int = typer.Option(512, "--gbs", help="global batch of formats without one"),
    cluster: str = typer.Option("dgx-a100:128", "--cluster", "-c", help="cluster the durations are priced on"),
    limit: int | None = typer.Option(None, "--limit", help="keep the first N jobs"),
) -> None:
    """Convert ElasticFlow / Philly / Helios / Acme traces to trainsim's schema."""
    from trainsim.cluster.importers import import_trace
    from trainsim.cluster.trace import write_trace
    from trainsim.io.atomic import check_output_path

    check_output_path(output, "--output")
    df = import_trace(source, fmt, mapping, default_model=default_model, gbs=gbs, cluster=cluster, limit=limit)
    write_trace(df, output)
    print(f"wrote {len(df)} jobs to {output}")


@casestudy_app.command("vtrain2")
def casestudy_vtrain2(
    itp: Path = typer.Option(..., "--itp", help="ITP cluster CSV"),
    seed: int = typer.Option(0, "--seed", help="seed"),
    cluster: str = typer.Option("dgx-a100:128", "--cluster", "-c", help="cluster (vTrain: 128 DGX A100)"),
    policy: str = typer.Option("elasticflow", "--policy", help="policy run with both throughput sources"),
    spaces: str = typer.Option("tdp", "--search-spaces", help="tdp, full or tdp,full"),
    framework: str = typer.Option("megatron-lm-2021", "--framework", help="the jobs' software stack (vTrain's)"),
    time_scale: float = typer.Option(10.0, "--time-scale",
                                     help="stretch ITP durations and arrival gaps alike (LLM job lengths)"),
    gpu_scale: int = typer.Option(32, "--gpu-scale",
                                  help="GPUs requested per ITP GPU (larger: more contention; 8 = one node each)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="directory for every run's outputs"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """vTrain §V-B: deadline (64, 128 jobs), JCT (32 jobs) and makespan experiments, best plan vs DP-only."""
    from trainsim.cluster.casestudy import format_casestudy, run_casestudy
    from trainsim.io.atomic import check_output_path

    if out is not None:
        check_output_path(out, "--out", directory=True)
    result = run_casestudy(itp, seed, cluster, policy, [s.strip() for s in spaces.split(",")], out,
                           framework=_framework(framework), time_scale=time_scale, gpu_scale=gpu_scale)
    if json_out:
        from trainsim.cli.output import print_json
        from trainsim.cluster.outputs import clean_json

        print_json(clean_json(result))
        return
    print(format_casestudy(result))
