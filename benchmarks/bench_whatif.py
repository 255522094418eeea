"""Benchmark of the what-if analysis on the three released straggler traces (ST, SE, AR).

Measures, per trace, the wall time of :func:`trainsim.whatif.analyze_trace` (reading the parquet, validation,
dependency model, decomposition, every attribution scenario, M_S, M_W, signals and verdict) and, optionally,
of the whole ``trainsim whatif TRACE --json`` command in a fresh interpreter (start-up and imports included).
Prints the machine, the per-trace times and the total; the target is under 6 s for the three traces on a
2-core machine.

    python benchmarks/bench_whatif.py [--repeat 3] [--cli] [--traces DIR] [--json]

The traces are read in place from ``$TRAINSIM_SHARED/data/straggler-traces`` (default ``../shared`` beside the
repository).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

JOBS = ("ST", "SE", "AR")


def default_traces() -> Path:
    env = os.environ.get("TRAINSIM_SHARED")
    base = Path(env) if env else Path(__file__).resolve().parents[1] / ".." / "shared"
    return (base / "data" / "straggler-traces").resolve()


def machine() -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy
    import pandas

    avail = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu,
        "cores_available": avail,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "os": platform.platform(),
    }


def bench_api(traces: Path, repeat: int) -> dict[str, list[float]]:
    import warnings

    from trainsim.whatif import analyze_trace

    times: dict[str, list[float]] = {j: [] for j in JOBS}
    for _ in range(repeat):
        for job in JOBS:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                analyze_trace(traces / f"trace-{job}.parquet", traces / f"meta-{job}.yaml")
            times[job].append(time.perf_counter() - t0)
    return times


def bench_cli(traces: Path, repeat: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {j: [] for j in JOBS}
    for _ in range(repeat):
        for job in JOBS:
            cmd = [sys.executable, "-m", "trainsim", "whatif", str(traces / f"trace-{job}.parquet"), "--json"]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times[job].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=default_traces())
    ap.add_argument("--repeat", type=int, default=3, help="runs per trace; the median is reported")
    ap.add_argument("--cli", action="store_true", help="also time 'python -m trainsim whatif --json'")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args()
    if not (args.traces / "trace-ST.parquet").is_file():
        sys.exit(f"traces not found in {args.traces} (set TRAINSIM_SHARED or pass --traces)")

    t0 = time.perf_counter()
    import trainsim.whatif  # noqa: F401  (import cost reported separately)

    import_s = time.perf_counter() - t0
    report: dict[str, object] = {"machine": machine(), "import_s": import_s, "repeat": args.repeat}
    api = bench_api(args.traces, args.repeat)
    report["api_s"] = {j: statistics.median(v) for j, v in api.items()}
    report["api_total_s"] = sum(report["api_s"].values())  # type: ignore[union-attr]
    if args.cli:
        cli = bench_cli(args.traces, args.repeat)
        report["cli_s"] = {j: statistics.median(v) for j, v in cli.items()}
        report["cli_total_s"] = sum(report["cli_s"].values())  # type: ignore[union-attr]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    m = report["machine"]
    print(
        f"machine: {m['cpu']}, {m['cores_available']} cores available, Python {m['python']}, "  # type: ignore[index]
        f"numpy {m['numpy']}, pandas {m['pandas']}"
    )  # type: ignore[index]
    print(f"import trainsim.whatif: {import_s:.3f} s")
    print(f"analyze_trace (median of {args.repeat}):")
    for j in JOBS:
        print(f"  {j}: {report['api_s'][j]:.3f} s")  # type: ignore[index]
    print(f"  total: {report['api_total_s']:.3f} s  (target < 6 s; reference implementation ~22 s)")
    if args.cli:
        print(f"trainsim whatif --json, fresh interpreter (median of {args.repeat}):")
        for j in JOBS:
            print(f"  {j}: {report['cli_s'][j]:.3f} s")  # type: ignore[index]
        print(f"  total: {report['cli_total_s']:.3f} s")


if __name__ == "__main__":
    main()
