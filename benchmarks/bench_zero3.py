"""Speed of ZeRO-3 / FSDP predictions (per-micro-batch sharded schedule, ``trainsim.cost.sharded``), both engines.

Run: python benchmarks/bench_zero3.py   (PYTHONPATH=src in a development checkout; the same script runs against an
older checkout for an A/B: it uses only ``trainsim.predict``/``simulate``-level API present since the first landing)
"""

from __future__ import annotations

import os
import statistics
import time

from trainsim.engine import simulate_job
from trainsim.estimate import estimate
from trainsim.spec import Job, Training, load_model, load_system

CASES = (("llama2-7b", 4096, 512, "none"), ("llama2-70b", 4096, 1024, "full"), ("gpt3-175b", 2048, 2048, "full"))
FRAMEWORKS = ("fsdp", "deepspeed", "torchtitan")


def build(name: str, seq: int, n: int, recompute: str, fw: str) -> Job:
    return Job(model=load_model(name), system=load_system("dgx-a100"), num_gpus=n, framework=fw,
               training=Training(global_batch_size=n, micro_batch_size=1, seq_length=seq, zero_stage=3,
                                 recompute_granularity=recompute))  # type: ignore[arg-type]


def timed(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return statistics.median(out)


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| case | framework | estimate (fresh job) ms | event engine (fresh job) ms |")
    print("|---|---|---:|---:|")
    for name, seq, n, rc in CASES:
        for fw in FRAMEWORKS:
            est = timed(lambda: estimate(build(name, seq, n, rc, fw)))  # noqa: B023
            ev = timed(lambda: simulate_job(build(name, seq, n, rc, fw)))  # noqa: B023
            print(f"| {name} {n} A100 | `{fw}` | {est * 1e3:.1f} | {ev * 1e3:.1f} |")


if __name__ == "__main__":
    main()
