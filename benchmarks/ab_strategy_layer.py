"""A/B CPU time of one analytic prediction and one event simulation (GPT-3 175B on 1024 A100, tp 8, pp 16).

Run it once per source tree to compare two versions on a busy machine: ``PYTHONPATH=<tree>/src python
benchmarks/ab_strategy_layer.py predict`` (best CPU time of 300 warm predictions) or ``... engine`` (best of 5
``simulate_job``). CPU time, not wall time, because the development host is shared.
"""

from __future__ import annotations

import sys
import time
import warnings

import trainsim
from trainsim.spec import load_model, load_system
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.training import Training


def main() -> None:
    warnings.simplefilter("ignore")
    what = sys.argv[1] if len(sys.argv) > 1 else "predict"
    job = Job(model=load_model("gpt3-175b"), system=load_system("dgx-a100"), num_gpus=1024,
              parallelism=Parallelism(tp=8, pp=16), training=Training(global_batch_size=1536, micro_batch_size=1))
    if what == "predict":
        for _ in range(30):
            trainsim.predict(job)
        best = float("inf")
        for _ in range(300):
            t0 = time.process_time()
            trainsim.predict(job)
            best = min(best, time.process_time() - t0)
        print(f"predict {best * 1e3:.3f} ms")
        return
    from trainsim.cost.job_costs import default_cost_model
    from trainsim.engine import simulate_job

    cm = default_cost_model(job)
    simulate_job(job, cm)
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        simulate_job(job, cm)
        best = min(best, time.process_time() - t0)
    print(f"engine {best:.3f} s")


if __name__ == "__main__":
    main()
