"""Speed of the measured-cost path: table loading, predictions with tables, nccl-tests parsing, CPU profiling.

- predict with a measured cost model (exact rows for the job, a GEMM sweep grid) against the analytic model, with
  the tables loaded once (``load_cost_tables``, as a search would) and per call (``measured_cost_model``);
- parsing a 2-node nccl-tests log of 24 runs x 31 sizes;
- ``profile_job`` of a small model on this CPU (skipped without PyTorch).

Run: python benchmarks/bench_profile.py
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

import trainsim
from trainsim.cost.job_costs import default_cost_model
from trainsim.cost.tables import load_cost_tables, measured_cost_model, normalize, op_key_columns, write_table
from trainsim.io.nccl_tests import comm_table, parse
from trainsim.profile.runner import job_operators, sweep_operators
from trainsim.spec import Job, Parallelism, Training, load_model, load_system


def best(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def synthetic_tables(job: Job, folder: Path) -> Path:
    analytic = default_cost_model(job)
    rows = [{**op_key_columns(op), "time_s": 1.1 * analytic.compute(op), "gpu": "h100", "source": "layer"}
            for op, _ in job_operators(job)]
    rows += [{**op_key_columns(op), "time_s": analytic.compute(op), "gpu": "h100", "source": "sweep"}
             for op in sweep_operators(["bf16"], attn_seq_lengths=(), attn_batch_heads=())]
    return write_table(normalize(pd.DataFrame(rows), "ops"), folder / "ops.parquet", "ops")


def nccl_log(runs: int = 24) -> str:
    lines = []
    for _ in range(runs):
        lines += ["# Collective test starting: all_reduce_perf", "# Using devices"]
        lines += [f"#  Rank {i:2d} Group  0 Pid {i:6d} on node{i // 8:04d} device {i % 8:2d} [0x{i:02x}] NVIDIA H100 "
                  f"80GB HBM3" for i in range(16)]
        lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
                     "   algbw   busbw #wrong")
        for s in range(31):
            size = 8 << s
            t = 20 + size / 3e5
            lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {t:7.2f}  {size / t / 1e3:6.2f}  "
                         f"{1.875 * size / t / 1e3:6.2f}       0  {t:7.2f}  {size / t / 1e3:6.2f}  "
                         f"{1.875 * size / t / 1e3:6.2f}       0")
    return "\n".join(lines)


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    job = Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"),
              parallelism=Parallelism(tp=2, sequence_parallel=True),
              training=Training(micro_batch_size=1, global_batch_size=256, seq_length=8192), num_gpus=64)
    with tempfile.TemporaryDirectory() as tmp:
        path = synthetic_tables(job, Path(tmp))
        rows = len(pd.read_parquet(path))
        load = best(lambda: load_cost_tables([path]), 5)
        tables = load_cost_tables([path])
        analytic = best(lambda: trainsim.predict(job), 200)
        reused = best(lambda: trainsim.predict(job, cost_model=tables.model_for(job)), 200)
        per_call = best(lambda: trainsim.predict(job, cost_model=measured_cost_model(job, op_tables=[path])), 5)
    print(f"operator table of {rows} rows: load + index {load * 1e3:.1f} ms")
    print(f"predict llama3-8b 64xH100: analytic {analytic * 1e6:.0f} µs; with tables loaded once "
          f"{reused * 1e6:.0f} µs; loading the tables each call {per_call * 1e3:.1f} ms")
    text = nccl_log()
    n_rows = 24 * 31 * 2
    parse_t = best(lambda: comm_table(parse(text)), 5)
    print(f"nccl-tests log of {n_rows} results: parse + table {parse_t * 1e3:.1f} ms ({n_rows / parse_t:,.0f} rows/s)")
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        print("profile_job: skipped (PyTorch not installed)")
        return
    from trainsim.profile.runner import profile_job

    small = Job(model=load_model("gpt3-1.7b").replace(num_layers=2, hidden_size=512, num_attention_heads=8),
                system=load_system("dgx-h100"), training=Training(micro_batch_size=1, global_batch_size=1,
                                                                  seq_length=512, precision="fp32"))
    t = time.perf_counter()
    df = profile_job(small, "cpu", warmup=2, reps=5)
    print(f"profile_job on CPU, hidden 512, seq 512: {len(df)} operators in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
