"""Speed of the event engine: the issue's three reference jobs, whole CLI calls, and growth with micro-batches,
pipeline stages and GPUs (symmetric, with one straggler, with sequence-length variation).

Run: python benchmarks/bench_engine.py [--repeat 3] [--no-cli] [--no-growth]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

from trainsim.cost import compute
from trainsim.engine import simulate_job
from trainsim.predictor import predict
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload import layers

CASES = {
    "GPT-3 175B, 1024 A100 (tp 8, pp 16, dp 8), 192 micro-batches": dict(
        model="gpt3-175b", system="dgx-a100", num_gpus=1024, par=dict(tp=8, pp=16),
        tr=dict(micro_batch_size=1, global_batch_size=1536, recompute_granularity="full", precision="fp16")),
    "MT-NLG 530B, 840 A100 (tp 8, pp 105, dp 1), 1920 micro-batches": dict(
        model="mt-nlg-530b", system="dgx-a100", num_gpus=840, par=dict(tp=8, pp=105),
        tr=dict(micro_batch_size=1, global_batch_size=1920, recompute_granularity="full", precision="fp16")),
    "Llama-3 405B, 16384 H100 (tp 8, pp 16, dp 128), 16 micro-batches": dict(
        model="llama3-405b", system="dgx-h100", num_gpus=16384,
        par=dict(tp=8, pp=16, sequence_parallel=True, first_stage_layers=7, last_stage_layers=7),
        tr=dict(micro_batch_size=1, global_batch_size=2048, seq_length=8192, zero_stage=1, overlap_grad_reduce=True,
                overlap_param_gather=True)),
}

CLI = {
    "GPT-3 175B, 1024 A100 (tp 8, pp 16, dp 8), 192 micro-batches": [
        "--model", "gpt3-175b", "--system", "dgx-a100", "--num-gpus", "1024", "--tp", "8", "--pp", "16",
        "--mbs", "1", "--gbs", "1536", "--recompute-granularity", "full", "--fp16"],
    "MT-NLG 530B, 840 A100 (tp 8, pp 105, dp 1), 1920 micro-batches": [
        "--model", "mt-nlg-530b", "--system", "dgx-a100", "--num-gpus", "840", "--tp", "8", "--pp", "105",
        "--mbs", "1", "--gbs", "1920", "--recompute-granularity", "full", "--fp16"],
    "Llama-3 405B, 16384 H100 (tp 8, pp 16, dp 128), 16 micro-batches": [
        "--model", "llama3-405b", "--system", "dgx-h100", "--num-gpus", "16384", "--tp", "8", "--pp", "16",
        "--sequence-parallel", "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7",
        "--mbs", "1", "--gbs", "2048", "--seq-length", "8192", "--use-distributed-optimizer",
        "--overlap-grad-reduce", "--overlap-param-gather"],
}


def build(c: dict) -> Job:
    return Job(model=load_model(c["model"]), system=load_system(c["system"]), parallelism=Parallelism(**c["par"]),
               training=Training(**c["tr"]), num_gpus=c["num_gpus"])


def clear_caches() -> None:
    compute.op_time.cache_clear()
    layers.layer_work.cache_clear()
    layers.embedding_work.cache_clear()
    layers.head_work.cache_clear()


def timed(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        clear_caches()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def cli_time(args: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainsim", "predict", *args, "--engine", "event", "--json"],
                       check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def reference(repeat: int, cli: bool) -> None:
    print("| job | tasks | engine (simulate_job) | predict(engine='event') | CLI `--engine event --json` | event / "
          "analytic iteration |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, c in CASES.items():
        job = build(c)
        t_sim, (_, extra) = timed(lambda job=job: simulate_job(job), repeat)
        t_pred, pred = timed(lambda job=job: predict(job, engine="event"), repeat)
        analytic = predict(job).iteration_time_s
        t_cli = f"{cli_time(CLI[name], repeat):.2f} s" if cli else "-"
        print(f"| {name} | {extra['engine_info']['tasks']:,} | {t_sim:.2f} s | {t_pred:.2f} s | {t_cli} | "
              f"{pred.iteration_time_s:.3f} s / {analytic:.3f} s |", flush=True)


def growth(repeat: int) -> None:
    def gpt3(pp: int = 16, m: int = 192, dp: int = 8, **kw: object) -> Job:
        return Job(model=load_model("gpt3-175b"), system=load_system("dgx-a100"),
                   parallelism=Parallelism(tp=8, pp=pp), num_gpus=8 * pp * dp,
                   training=Training(micro_batch_size=1, global_batch_size=m * dp, recompute_granularity="full",
                                     precision="fp16"))

    print("\nGrowth (GPT-3 175B, tp 8; best of", repeat, "runs):\n")
    print("| varied | value | GPUs | tasks | replica classes | engine |")
    print("|---|---:|---:|---:|---:|---:|")
    for m in (48, 96, 192, 384, 768, 1536):
        job = gpt3(m=m)
        t, (_, extra) = timed(lambda job=job: simulate_job(job), repeat)
        print(f"| micro-batches (pp 16, dp 8) | {m} | {job.world_size} | {extra['engine_info']['tasks']:,} | "
              f"{extra['engine_info']['replica_classes']} | {t:.3f} s |", flush=True)
    for pp in (4, 8, 16, 32, 48, 96):
        job = gpt3(pp=pp, m=192)
        t, (_, extra) = timed(lambda job=job: simulate_job(job), repeat)
        print(f"| stages (m 192, dp 8) | {pp} | {job.world_size} | {extra['engine_info']['tasks']:,} | "
              f"{extra['engine_info']['replica_classes']} | {t:.3f} s |", flush=True)
    for dp in (1, 8, 64, 512):
        for label, opts in (("symmetric", {}), ("one slow GPU", {"slow_rank": {9: 1.5}}),
                            ("seq-len CV 0.3", {"seq_len_cv": 0.3})):
            job = gpt3(dp=dp, m=64)
            t, (_, extra) = timed(lambda job=job, opts=opts: simulate_job(job, **opts), repeat)
            print(f"| GPUs (pp 16, m 64), {label} | dp {dp} | {job.world_size} | {extra['engine_info']['tasks']:,} "
                  f"| {extra['engine_info']['replica_classes']} | {t:.3f} s |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--no-growth", action="store_true")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}\n")
    reference(args.repeat, not args.no_cli)
    if not args.no_growth:
        growth(args.repeat)


if __name__ == "__main__":
    main()
