"""``deadline-plan``: trainsim's plan-, pool- and cost-aware deadline scheduler.

Rules, at every event (pools in spec order, jobs in trace order on ties):

1. **Admission** (when a job is first seen): a job with a deadline is admitted if some allowed pool has room for a
   GPU count that finishes it by its deadline; otherwise it is rejected (``deadline cannot be met``).
2. **Cheapest satisfying configuration**: admitted deadline jobs, earliest deadline first, each take the
   (pool, GPU count, and with it the plan the throughput model picks for that count) that meets the deadline at the
   lowest cost (GPUs × remaining time × the pool's price; ties: fewer GPUs, then pool order), among those with room;
   a running job keeps its configuration while it still meets the deadline (a move costs a restart).
3. **Leftovers**: every pool's remaining GPUs go, one usable size step at a time, to the job on that pool whose step
   costs the least extra GPU-time for its remaining work (as ``elasticflow``); jobs without a deadline
   start on the pool where their smallest usable size is cheapest. Running jobs keep their size and are grown only
   at rebalances (every ``rebalance_s``, default 600 s), as in ``elasticflow``.
"""

from __future__ import annotations

import math

from trainsim.cluster.policies.base import JobState, Target, View, register
from trainsim.cluster.policies.elastic_common import RebalancingPolicy, Sizes, hand_out


@register
class DeadlinePlan(RebalancingPolicy):
    """Plan-, pool- and cost-aware deadline scheduling."""

    name = "deadline-plan"

    def __init__(self, rebalance_s: float = 600.0) -> None:
        super().__init__(rebalance_s)
        self.sizes: dict[tuple[int, str], Sizes] = {}

    def _sizes(self, view: View, js: JobState, pool) -> Sizes:  # type: ignore[no-untyped-def]
        key = (js.spec.index, pool.name)
        if key not in self.sizes:
            self.sizes[key] = Sizes(view, js, pool)
        return self.sizes[key]

    def _cheapest(self, view: View, js: JobState, free: dict[str, int]) -> tuple[str, int] | None:
        left = js.spec.deadline_s - view.now if js.spec.deadline_s is not None else math.inf
        best: tuple[float, int, int, str] | None = None
        for k, p in enumerate(view.pools_for(js.spec)):
            s = self._sizes(view, js, p)
            for n, t in zip(s.sizes.tolist(), s.times.tolist(), strict=True):
                if n > free[p.name] or js.remaining * t > left:
                    continue
                cost = n * js.remaining * t * p.price
                cand = (cost, n, k, p.name)
                if best is None or cand < best:
                    best = cand
        return None if best is None else (best[3], best[1])

    def schedule(self, view: View) -> dict[int, Target]:
        """Admission, cheapest satisfying configurations, leftovers."""
        rebalance = self.rebalance_due(view)
        free = dict(view.capacity)
        alloc: dict[int, tuple[str, int]] = {}
        deadline_jobs = sorted((j for j in view.jobs if j.spec.deadline_s is not None),
                               key=lambda j: (j.spec.deadline_s, j.spec.index))
        for js in deadline_jobs:
            i = js.spec.index
            new = i not in self.seen
            self.seen.add(i)
            keep = None
            deadline = js.spec.deadline_s
            if js.running and js.pool is not None and js.gpus <= free[js.pool] and deadline is not None:
                pool = next(p for p in view.pools if p.name == js.pool)
                t = view.time_at(js.spec, pool, js.gpus)
                if view.now + js.remaining * t <= deadline:
                    keep = (js.pool, js.gpus)
            cfg = keep or self._cheapest(view, js, free)
            if cfg is None:
                if new:
                    view.reject(i, "deadline cannot be met")
                continue
            alloc[i] = cfg
            free[cfg[0]] -= cfg[1]
        for js in view.jobs:
            self.seen.add(js.spec.index)
        live = [j for j in view.jobs if j.spec.index not in view.rejected]
        out: dict[int, Target] = {}
        for p in view.pools:
            here = [j for j in live if (j.spec.index in alloc and alloc[j.spec.index][0] == p.name)
                    or (j.spec.index not in alloc and self._home(view, j) == p.name)]
            counts = {j.spec.index: alloc[j.spec.index][1] for j in here if j.spec.index in alloc}
            sizes = {j.spec.index: self._sizes(view, j, p) for j in here}
            for j in here:  # running jobs keep their size between rebalances
                if j.running and not rebalance and j.spec.index not in counts and free[p.name] >= j.gpus:
                    counts[j.spec.index] = j.gpus
                    free[p.name] -= j.gpus
            growable = here if rebalance else [j for j in here if not j.running]
            free[p.name] = hand_out(view, p.name, free[p.name], counts, sizes, growable)
            for j in sorted(here, key=lambda j: (not j.running, j.spec.index)):
                n = counts.get(j.spec.index, 0)
                if n > 0:
                    out[j.spec.index] = Target(p.name, n)
        return out

    def _home(self, view: View, js: JobState) -> str:
        """Pool of a job without a configuration: its current one, else the cheapest smallest usable size."""
        if js.running and js.pool is not None:
            return js.pool
        best: tuple[float, int, str] | None = None
        for k, p in enumerate(view.pools_for(js.spec)):
            s = self._sizes(view, js, p)
            if len(s.sizes):
                cand = (float(s.sizes[0] * s.times[0] * p.price), k, p.name)
                if best is None or cand < best:
                    best = cand
        return best[2] if best is not None else view.pools_for(js.spec)[0].name
