"""Speed of the design-space search and of compute-optimal planning, and the case-study tables of docs/search.md.

Run:
    python benchmarks/bench_search.py                 # timings (CLI in fresh interpreters, and in process)
    python benchmarks/bench_search.py --tables        # also print the case-study tables (markdown)
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


# ---- case-study tables ---------------------------------------------------------------------------------------------
def _row(label: str, c) -> str:
    fits = "yes" if c.fits else "**no**"
    time_s = f"{c.iteration_time_s:.1f}" if c.iteration_time_s else "–"
    mfu = f"{c.mfu:.1%}" if c.mfu else "–"
    days = f"{c.training_days:.1f}" if c.training_days else "–"
    cost = f"{c.cost_usd / 1e6:.2f}" if c.cost_usd else "–"
    return (f"| {label} | ({c.tp}, {c.dp}, {c.pp}) | {c.num_gpus:,} | {time_s} | {mfu} | {days} | {cost} | "
            f"{c.peak_memory_bytes / 1e9:.1f} ({fits}) |")


def mtnlg_tables() -> None:
    from trainsim.search import SearchSpace, search
    from trainsim.spec import Training

    head = ("| plan | (t, d, p) | GPUs | iteration (s) | MFU | days | cost ($M) | peak GB (fits 80 GiB) |\n"
            "|---|---|---:|---:|---:|---:|---:|---|")
    for zero, title in ((0, "no distributed optimizer (ZeRO 0)"), (1, "distributed optimizer (ZeRO-1)")):
        r = search(SearchSpace(model="mt-nlg-530b", system="dgx-a100", tp="4,8,16",
                               dp="1,2,3,4,5,6,8,10,12,15,16,20,24,30", pp="3,5,7,15,21,35,105", zero_stage=zero,
                               others="default",
                               training=Training(global_batch_size=1920, seq_length=2048,
                                                 recompute_granularity="full", train_tokens=270e9)),
                   objective="cost", include_unfit=True)
        by = {(c.tp, c.dp, c.pp): c for c in r.candidates}
        print(f"\n#### MT-NLG 530B, {title}\n")
        print(head)
        for key in ((8, 8, 35), (8, 10, 35), (8, 12, 35)):
            print(_row("MT-NLG", by[key]))
        for key in ((8, 12, 21), (8, 15, 21), (8, 24, 15)):
            print(_row("vTrain", by[key]))
        for ref in (2240, 2800, 3360):
            lo, hi = int(ref * 0.9), int(ref * 1.1)
            near = [c for c in r.candidates if lo <= c.num_gpus <= hi and c.fits]
            cheapest = min(near, key=lambda c: (c.cost_usd, c.index))
            fastest = min(near, key=lambda c: (c.training_days, c.index))
            print(_row(f"search: cheapest, {lo:,}–{hi:,} GPUs", cheapest))
            print(_row(f"search: fastest, {lo:,}–{hi:,} GPUs", fastest))
        fitting = [c for c in r.candidates if c.fits]
        print(_row("search: cheapest overall", min(fitting, key=lambda c: (c.cost_usd, c.index))))


def placement_table() -> None:
    from trainsim.search import SearchSpace, search
    from trainsim.spec import Training, load_system

    print("\n#### GPT-3 1T on B200: best plan per GPU count and NVLink domain size\n")
    print("| NVLink domain | GPUs | best (tp, pp, vpp, dp) | mbs | recompute | rank order | iteration (s) | MFU | "
          "days (450B tokens) |\n|---:|---:|---|---:|---|---|---:|---:|---:|")
    base = load_system("dgx-b200")
    for gpn in (4, 8, 72):
        system = base.replace(node=base.node.replace(gpus_per_node=gpn),
                              network=base.network.replace(nics_per_node=gpn))
        for n in (1024, 2048, 4096, 8192, 16384):
            r = search(SearchSpace(model="gpt3-1t", system=system, num_gpus=n, cp=1, vpp="1,2,4",
                                   micro_batch_size="1,2", zero_stage=1, sequence_parallel=True,
                                   training=Training(global_batch_size=3072, train_tokens=450e9)),
                       objective="training-time")
            c = r.best
            print(f"| {gpn} | {n:,} | ({c.tp}, {c.pp}, {c.vpp}, {c.dp}) | {c.micro_batch_size} | {c.recompute} | "
                  f"{c.rank_order} | {c.iteration_time_s:.2f} | {c.mfu:.1%} | {c.training_days:.1f} |")


def plan_tables() -> None:
    from trainsim.plan import plan

    print("\n#### Compute-optimal model for 3,360 A100 × 30 days\n")
    print("| setting | point | params | tokens | shape (L × h) | plan (t, p, d), mbs, recompute | MFU | days |\n"
          "|---|---|---:|---:|---|---|---:|---:|")
    for label, dims in (("modern (plan defaults)", None),
                        ("MT-NLG-era (full recompute, no SP, no dist. optimizer, mbs 1)",
                         {"recompute": "full", "sequence_parallel": False, "zero_stage": 0,
                          "micro_batch_size": 1})):
        d = plan("dgx-a100", 3360, days=30, dims=dims).to_json_dict()
        for point in ("naive", "optimal"):
            p = d[point]
            shape = p.get("shape") or {"layers": p.get("layers"), "hidden_size": p.get("hidden_size")}
            q = p["plan"]
            print(f"| {label} | {point} | {p['params'] / 1e9:.1f}B | {p['tokens'] / 1e12:.2f}T | "
                  f"{shape['layers']} × {shape['hidden_size']} | ({q['tp']}, {q['pp']}, {q['dp']}), "
                  f"{q['micro_batch_size']}, {q['recompute']} | {p['mfu']:.1%} | {p['days']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", action="store_true", help="print the case-study tables of docs/search.md")
    ap.add_argument("--quick", action="store_true", help="skip the open 175B search (about a minute)")
    ap.add_argument("--no-timings", action="store_true", help="only the tables")
    args = ap.parse_args()
    if not args.no_timings:
        timings(args.quick)
    if args.tables:
        mtnlg_tables()
        placement_table()
        plan_tables()


if __name__ == "__main__":
    main()
