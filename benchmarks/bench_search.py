"""Speed of the design-space search and of compute-optimal planning (the case-study tables of docs/search.md are
printed by ``python scripts/doc_tables.py search-mtnlg|search-nvlink|search-plan``).

Run:
    python benchmarks/bench_search.py                 # timings (CLI in fresh interpreters, and in process)
    python benchmarks/bench_search.py --quick         # skip the 60-s open search

Targets (issue 5, 2 cores): the MT-NLG grid (294 points) under 10 s through the CLI; an open search over all
dimensions for GPT-3 175B on 1024 GPUs under 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

MTNLG_ARGS = ["-m", "mt-nlg-530b", "-s", "dgx-a100", "--tp", "4,8,16", "--dp", "1,2,3,4,5,6,8,10,12,15,16,20,24,30",
              "--pp", "3,5,7,15,21,35,105", "--gbs", "1920", "--seq-length", "2048", "--recompute-granularity", "full",
              "--train-tokens", "270e9", "--others", "default", "--objective", "cost"]
OPEN_175B_ARGS = ["-m", "gpt3-175b", "-s", "dgx-a100", "-n", "1024", "--gbs", "1536", "--train-tokens", "300e9"]
PLAN_ARGS = ["-s", "dgx-a100", "-n", "3360", "--days", "30"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli(command: str, args: list[str], repeat: int) -> tuple[float, dict]:
    """Median wall time of ``trainsim <command> … --json`` in a fresh interpreter, and its last JSON output (with
    ``cpu_seconds``: CPU time of the command and its workers, which a busy host does not inflate)."""
    times, cpus, out = [], [], {}
    for _ in range(repeat):
        t, c = time.perf_counter(), _children_cpu()
        proc = subprocess.run([sys.executable, "-m", "trainsim", command, *args, "--json"], check=True,
                              capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        cpus.append(_children_cpu() - c)
        out = json.loads(proc.stdout)
    out["cpu_seconds"] = statistics.median(cpus)
    return statistics.median(times), out


def timings(quick: bool) -> None:
    from trainsim.search import SearchSpace, search
    from trainsim.spec import Training

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    t, d = cli("search", MTNLG_ARGS, 3)
    s = d["summary"]
    print(f"MT-NLG grid via CLI: {t:.2f} s wall (median of 3; {d['cpu_seconds']:.2f} CPU-s), {s['valid']} candidates, "
          f"{s['candidates_per_s']:,.0f} candidates/s in evaluation ({s['workers']} worker)")
    space = SearchSpace(model="mt-nlg-530b", system="dgx-a100", tp="4,8,16", dp="1,2,3,4,5,6,8,10,12,15,16,20,24,30",
                        pp="3,5,7,15,21,35,105", others="default",
                        training=Training(global_batch_size=1920, seq_length=2048, recompute_granularity="full",
                                          train_tokens=270e9))
    for workers in (1, 2):
        t0 = time.perf_counter()
        r = search(space, objective="cost", workers=workers)
        print(f"  in process, {workers} worker(s): {time.perf_counter() - t0:.2f} s "
              f"({len(r.candidates) / r.stats['seconds']:,.0f} candidates/s overall)")
    t, d = cli("plan", PLAN_ARGS, 1)
    print(f"plan 3,360 A100 × 30 days via CLI: {t:.2f} s wall, {d['search']['shapes_evaluated']} shapes searched")
    if quick:
        return
    t, d = cli("search", OPEN_175B_ARGS, 1)
    s = d["summary"]
    print(f"open search GPT-3 175B on 1024 A100 via CLI: {t:.1f} s wall ({d['cpu_seconds']:.0f} CPU-s); "
          f"{s['combinations']:,} combinations, "
          f"{s['valid']:,} valid, {s['fitting']:,} fit, {s['equivalent_merged']:,} merged; enumeration "
          f"{s['enumeration_seconds']:.1f} s, evaluation {s['evaluation_seconds']:.1f} s = "
          f"{s['candidates_per_s']:,.0f} candidates/s on {s['workers']} workers")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the open 175B search (about a minute)")
    args = ap.parse_args()
    timings(args.quick)


if __name__ == "__main__":
    main()
