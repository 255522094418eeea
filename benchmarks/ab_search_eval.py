"""A/B CPU time of one in-process search (enumeration + analytic evaluation, 1 worker): GPT-3 175B on 1024 A100,
tp 8, pp 16, cp = ep = 1, every other dimension open (2,340 candidates).

Run it once per source tree to compare two versions on a busy machine: ``PYTHONPATH=<tree>/src python
benchmarks/ab_search_eval.py LABEL`` (best CPU time of 3 after a warm-up; CPU time because the host is shared).
"""

from __future__ import annotations

import sys
import time
import warnings

from trainsim.search import SearchSpace, search
from trainsim.search.space import enumerate_space
from trainsim.spec.training import Training


def main() -> None:
    warnings.simplefilter("ignore")
    label = sys.argv[1] if len(sys.argv) > 1 else "tree"
    space = SearchSpace(model="gpt3-175b", system="dgx-a100", num_gpus=1024, tp="8", pp="16", cp="1", ep="1",
                        training=Training(global_batch_size=1536, train_tokens=300e9))
    search(space, workers=1)  # warm caches
    best_enum = best_search = float("inf")
    n = 0
    for _ in range(3):
        t0 = time.process_time()
        enumerate_space(space)
        best_enum = min(best_enum, time.process_time() - t0)
        t0 = time.process_time()
        n = len(search(space, workers=1).candidates)
        best_search = min(best_search, time.process_time() - t0)
    print(f"{label}: {n} candidates; enumerate {best_enum:.2f} CPU-s; search {best_search:.2f} CPU-s "
          f"({n / best_search:.0f} candidates/CPU-s)")


if __name__ == "__main__":
    main()
