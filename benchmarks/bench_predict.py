"""Speed of one analytic prediction in process, and of the CLI start-up.

Run: python benchmarks/bench_predict.py
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time

import trainsim
from trainsim.cost import compute
from trainsim.cost.kernel_surfaces import packaged_surface
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload import layers

CASES = {
    "gpt3-175b 1024xA100 (8,16,8)": dict(model="gpt3-175b", system="dgx-a100", num_gpus=1024,
                                         par=dict(tp=8, pp=16), tr=dict(global_batch_size=1536,
                                                                        recompute_granularity="full")),
    "llama3-405b 16384xH100 (8,16,128)": dict(model="llama3-405b", system="dgx-h100", num_gpus=16384,
                                              par=dict(tp=8, pp=16, vpp=1, cp=1, sequence_parallel=True,
                                                       first_stage_layers=7, last_stage_layers=7),
                                              tr=dict(global_batch_size=2048, zero_stage=1)),
}


def build(c: dict) -> Job:
    return Job(model=load_model(c["model"]), system=load_system(c["system"]), parallelism=Parallelism(**c["par"]),
               training=Training(**c["tr"]), num_gpus=c["num_gpus"])


def clear_caches() -> None:
    compute.op_time.cache_clear()
    layers.layer_work.cache_clear()
    layers.embedding_work.cache_clear()
    layers.head_work.cache_clear()
    surface = packaged_surface()
    if hasattr(surface, "clear_memo"):  # the interpolated kernel shapes (absent in trees before the memo)
        surface.clear_memo()


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    for name, c in CASES.items():
        job = build(c)
        cold = []
        for _ in range(20):
            job = build(c)  # a new job object: the per-job memos (trainsim.workload.memo) start empty
            clear_caches()
            t = time.perf_counter()
            trainsim.predict(job)
            cold.append(time.perf_counter() - t)
        warm = []
        for _ in range(200):
            t = time.perf_counter()
            trainsim.predict(job)
            warm.append(time.perf_counter() - t)
        build_t = []
        for _ in range(200):
            t = time.perf_counter()
            build(c)
            build_t.append(time.perf_counter() - t)
        print(f"{name}: predict cold {statistics.median(cold) * 1e3:.2f} ms, warm {statistics.median(warm) * 1e3:.2f}"
              f" ms, job validation {statistics.median(build_t) * 1e3:.2f} ms")
    cli = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainsim", "predict", "-m", "gpt3-175b", "-s", "dgx-a100", "-n",
                        "1024", "--tp", "8", "--pp", "16", "--gbs", "1536", "--json"], check=True,
                       capture_output=True)
        cli.append(time.perf_counter() - t)
    help_t = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainsim", "--help"], check=True, capture_output=True)
        help_t.append(time.perf_counter() - t)
    print(f"CLI: `trainsim --help` {statistics.median(help_t):.2f} s, full `trainsim predict --json` "
          f"{statistics.median(cli):.2f} s (median of 5)")


if __name__ == "__main__":
    main()
