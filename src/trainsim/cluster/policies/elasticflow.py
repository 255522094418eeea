"""``elasticflow``: ElasticFlow (Gu et al., ASPLOS'23): admission control, minimum satisfactory shares, elastic
scale-out of the leftovers.

Rules, at every event (GPU counts are powers of two, as in ElasticFlow's buddy allocation and its throughput
profiles on 1, 2, 4, … GPUs; ``pow2=False`` opens every size on the throughput curve):

1. **Admission** (once, when a job is first seen): a job with a deadline is admitted if its minimum satisfactory
   share (the smallest usable GPU count that finishes its work by the deadline at the throughput the policy's source
   predicts) plus the shares of the admitted deadline jobs fit in the pool; otherwise it is rejected
   (``deadline cannot be met``). Jobs without a deadline are admitted as best-effort.
2. **Minimum shares**: admitted deadline jobs, earliest deadline first (ties: trace order), get their current
   minimum share; a job whose deadline can no longer be met becomes best-effort.
3. **Best effort**: every other job gets its smallest usable size (trace order) while GPUs remain.
4. **Stickiness**: a running job keeps its current size when it is above its share and still fits (trace order),
   since every resize costs a checkpoint restart.
5. **Leftovers**: the remaining GPUs go, one usable size step at a time, to the step with the best marginal
   scaling efficiency (throughput gained per GPU over the job's throughput per GPU at its smallest size; ties:
   trace order). Running jobs are grown only at
   rebalances (every ``rebalance_s``, default 600 s, a scheduling tick); in between, leftovers go to waiting jobs,
   so that a job is not checkpointed and restarted at every arrival.

Simplification (documented in docs/cluster.md): shares are checked at the current instant, not over ElasticFlow's
future time slots, so admission is slightly stricter than the original's. The usable sizes come from the throughput
curve, so the policy is plan-aware exactly when the throughput source is (``best`` vs ``dp-only``).
"""

from __future__ import annotations

from trainsim.cluster.policies.base import Target, View, register
from trainsim.cluster.policies.elastic_common import RebalancingPolicy, Sizes, hand_out, targets


@register
class ElasticFlow(RebalancingPolicy):
    """Deadline-aware elastic scheduling with admission control."""

    name = "elasticflow"

    def __init__(self, rebalance_s: float = 600.0, pow2: bool = True) -> None:
        super().__init__(rebalance_s)
        self.pow2 = pow2
        self.sizes: dict[int, Sizes] = {}

    def _pool(self, view: View, js) -> object:  # type: ignore[no-untyped-def]
        pools = view.pools_for(js.spec)
        return max(pools, key=lambda p: view.capacity[p.name]) if len(pools) > 1 else pools[0]

    def schedule(self, view: View) -> dict[int, Target]:
        """Admission, minimum shares, leftovers."""
        out: dict[int, Target] = {}
        rebalance = self.rebalance_due(view)
        by_pool: dict[str, list] = {}
        for js in view.jobs:
            pool = self._pool(view, js)
            by_pool.setdefault(pool.name, []).append(js)  # type: ignore[attr-defined]
            if js.spec.index not in self.sizes:
                self.sizes[js.spec.index] = Sizes(view, js, pool, self.pow2)  # type: ignore[arg-type]
        for pool_name, jobs in by_pool.items():
            cap = view.capacity[pool_name]
            alloc: dict[int, int] = {}
            used = 0
            deadline_jobs = sorted((j for j in jobs if j.spec.deadline_s is not None),
                                   key=lambda j: (j.spec.deadline_s, j.spec.index))
            # shares of already admitted jobs first, then admission of new ones in EDF order
            shares: dict[int, int | None] = {}
            for js in deadline_jobs:
                shares[js.spec.index] = self.sizes[js.spec.index].min_share(js.remaining,
                                                                            js.spec.deadline_s - view.now)
            for js in deadline_jobs:
                i = js.spec.index
                if i not in self.seen:
                    continue
                s = shares[i]
                if s is not None and used + s <= cap:
                    alloc[i] = s
                    used += s
            for js in deadline_jobs:
                i = js.spec.index
                if i in self.seen:
                    continue
                self.seen.add(i)
                s = shares[i]
                if s is None or used + s > cap:
                    view.reject(i, "deadline cannot be met")
                    continue
                alloc[i] = s
                used += s
            for js in jobs:
                self.seen.add(js.spec.index)
            live = [j for j in jobs if j.spec.index not in view.rejected]
            # best-effort jobs get their smallest usable size (trace order), before running jobs keep extra GPUs
            for js in live:
                i = js.spec.index
                if i not in alloc and len(self.sizes[i].sizes):
                    s = int(self.sizes[i].sizes[0])
                    if used + s <= cap:
                        alloc[i] = s
                        used += s
            # running jobs keep their size where it still fits (a resize costs a checkpoint restart)
            for js in live:
                i = js.spec.index
                if js.running and js.pool == pool_name and js.gpus > alloc.get(i, 0):
                    extra = js.gpus - alloc.get(i, 0)
                    if used + extra <= cap:
                        alloc[i] = js.gpus
                        used += extra
            growable = live if rebalance else [j for j in live if not j.running]
            hand_out(view, pool_name, cap - used, alloc, self.sizes, growable)
            order = [j.spec.index for j in live if j.running] + [j.spec.index for j in live if not j.running]
            out.update(targets(alloc, pool_name, order))
        return out
