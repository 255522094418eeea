"""Speed of the cluster simulator (cold plan cache per case): the 64-job vTrain case-study trace (engine and CLI),
1,500 ITP jobs on 512 GPUs
with ElasticFlow, 10,000 jobs on 10,240 GPUs with fifo, las and elasticflow (time and peak RSS, one fresh process
per case). The ITP traces are extracted to a temporary directory from ../shared/data/cluster-traces.

Run: python benchmarks/bench_cluster.py [--quick] [--cases 64,1500,10000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRAINSIM_SHARED", REPO.parent / "shared"))


def extract(tmp: Path) -> Path:
    """The raw ITP traces, extracted into ``tmp``."""
    with tarfile.open(SHARED / "data" / "cluster-traces" / "raw-traces.tar.gz") as tf:
        tf.extractall(tmp, filter="data")
    return tmp


def one_case(itp: str, jobs: int, nodes: int, policy: str, time_scale: float = 1.0,
             gpu_scale: int = 8) -> dict[str, float]:
    """Generate a vTrain-recipe trace, then time curves+engine (cold) and the engine alone (warm throughput)."""
    import warnings

    from trainsim.cluster import run
    from trainsim.cluster.generators import vtrain2
    from trainsim.cluster.outputs import allocations_frame, jobs_frame, metrics
    from trainsim.cluster.throughput import ThroughputModel

    warnings.simplefilter("ignore")
    cluster = f"dgx-a100:{nodes}"
    t0 = time.perf_counter()
    trace = vtrain2(itp, jobs, 0, cluster, time_scale=time_scale, gpu_scale=gpu_scale)
    t_gen = time.perf_counter() - t0
    tm = ThroughputModel()
    t0 = time.perf_counter()
    res = run(trace, cluster, policy=policy, throughput=tm)
    alloc = allocations_frame(res)
    m = metrics(res, jobs_frame(res, alloc), alloc)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    run(trace, cluster, policy=policy, throughput=tm)
    t_engine = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"generate_s": t_gen, "cold_s": t_cold, "engine_s": t_engine, "rss_mb": rss, "events": m["events"],
            "dsr": m["dsr"], "gpu_util": m["gpu_util"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="64,1500,10000")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:  # child process: one case, JSON on stdout
        itp, jobs, nodes, policy, scale, gscale = args.case.split("|")
        print(json.dumps(one_case(itp, int(jobs), int(nodes), policy, float(scale), int(gscale))))
        return
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    wanted = set(args.cases.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        d = extract(Path(tmp))
        cases = []
        if "64" in wanted:
            cases.append(("64-job case study (cluster01, 1,024 GPUs)", d / "cluster01.csv", 64, 128, "elasticflow",
                          1.0, 8))
            cases.append(("64-job case study, --time-scale 10", d / "cluster01.csv", 64,
                          128, "elasticflow", 10.0, 8))
            cases.append(("64-job case study, --time-scale 10 --gpu-scale 32 (the casestudy's defaults)",
                          d / "cluster01.csv", 64, 128, "elasticflow", 10.0, 32))
        if "1500" in wanted:
            cases.append(("1,500 ITP jobs, 512 GPUs", d / "cluster01.csv", 1500, 64, "elasticflow", 1.0, 8))
        if "10000" in wanted:
            for pol in ("fifo", "las", "elasticflow"):
                cases.append((f"10,000 ITP jobs (cluster04), 10,240 GPUs, {pol}", d / "cluster04.csv", 10000, 1280,
                              pol, 1.0, 8))
        print("| case | policy | generate | curves + engine | engine (warm curves) | events | peak RSS |")
        print("|---|---|---:|---:|---:|---:|---:|")
        # a fresh plan cache: "curves + engine" is a cold start; the CLI runs below reuse what the cases stored
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TRAINSIM_CACHE_DIR": str(Path(tmp) / "cache")}
        for label, itp, jobs, nodes, pol, scale, gscale in cases:
            out = subprocess.run([sys.executable, __file__, "--case", f"{itp}|{jobs}|{nodes}|{pol}|{scale}|{gscale}"],
                                 env=env,
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {label} | {pol} | {r['generate_s']:.2f} s | {r['cold_s']:.2f} s | {r['engine_s']:.2f} s | "
                  f"{r['events']:,} | {r['rss_mb']:.0f} MB |", flush=True)
        if "64" in wanted:
            trace = Path(tmp) / "t64.csv"
            subprocess.run([sys.executable, "-m", "trainsim", "cluster", "trace", "vtrain2", "--itp",
                            str(d / "cluster01.csv"), "--jobs", "64", "--seed", "0", "-o", str(trace)], env=env,
                           check=True, capture_output=True)
            times = []
            for _ in range(3):  # the plan cache is warm (filled by the case above)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "trainsim", "cluster", "run", "-t", str(trace), "-p",
                                "elasticflow", "--json"], env=env, check=True, capture_output=True)
                times.append(time.perf_counter() - t0)
            print(f"\nCLI `trainsim cluster run` on the 64-job trace (fresh interpreter, elasticflow, best tdp, "
                  f"warm plan cache): median {sorted(times)[1]:.2f} s")


if __name__ == "__main__":
    main()
