"""``elasticflow``: ElasticFlow (Gu et al., ASPLOS'23): admission control, minimum satisfactory shares, elastic
scale-out of the leftovers.

Rules, at every event (GPU counts are powers of two, as in ElasticFlow's buddy allocation and its throughput
profiles on 1, 2, 4, … GPUs; ``pow2=False`` opens every size on the throughput curve):

1. **Admission** (once, when a job is first seen), ElasticFlow's rule (``ef_sim_allocation`` in its scheduler): the
   admitted deadline jobs reserve their current minimum satisfactory share (the smallest usable GPU count that
   finishes their work by their deadline at the throughput the policy's source predicts) from now until they would
   finish at it; a new job with a deadline is admitted if, on the GPUs this leaves free over time, some quota ``q``
   (smallest first) finishes it by its deadline when it runs at the largest usable size ≤ min(q, free GPUs) in every
   period, filled backwards from the deadline; its plan is then booked for the next arrivals of the same instant.
   Otherwise it is rejected (``deadline cannot be met``). ``admission="instant"`` is the stricter check that only
   looks at the current instant (the new job's share must fit now). Jobs without a deadline are admitted as
   best-effort.
2. **Minimum shares**: admitted deadline jobs, earliest deadline first (ties: trace order), get their current
   minimum share, restart costs included (:func:`~trainsim.cluster.policies.elastic_common.min_share`: a job that
   would change size must meet its deadline after the restart and the iteration in progress it loses, else it keeps
   its size); a job whose deadline can no longer be met becomes best-effort.
3. **Best effort**: every other job gets its smallest usable size (trace order) while GPUs remain.
4. **Stickiness**: a running job keeps its current size when it is above its share and still fits (trace order),
   since every resize costs a checkpoint restart.
5. **Leftovers**: the remaining GPUs go, one usable size step at a time, waiting jobs first, then to the step with
   the smallest marginal GPU-time (ElasticFlow's ``marginal_gputime``: the extra GPU-time the job's remaining work
   takes per added GPU; :func:`~trainsim.cluster.policies.elastic_common.hand_out`; ties: trace order), skipping a
   step whose restart would make a running job finish later. Running jobs are grown only at
   rebalances (every ``rebalance_s``, default 600 s, a scheduling tick); in between, leftovers go to waiting jobs,
   so that a job is not checkpointed and restarted at every arrival.

Simplifications (documented in docs/cluster.md): the admitted jobs' reservations are their current shares held
from now (ElasticFlow keeps each job's earlier plan), so a job admitted on GPUs that free up later can be displaced
by later admissions with earlier deadlines; time is continuous (no 60 s slots). ElasticFlow resizes almost for free;
trainsim's checkpoint restarts cost minutes, hence the restart-aware shares and leftovers (rules 2 and 5). The
usable sizes come from the throughput curve, so the policy is plan-aware exactly when the throughput source is
(``best`` vs ``dp-only``).
"""

from __future__ import annotations

from trainsim.cluster.policies.base import Target, View, register
from trainsim.cluster.policies.elastic_common import (
    RebalancingPolicy,
    Share,
    Sizes,
    Timeline,
    hand_out,
    min_share,
    targets,
)
from trainsim.errors import TrainsimError


@register
class ElasticFlow(RebalancingPolicy):
    """Deadline-aware elastic scheduling with admission control."""

    name = "elasticflow"

    def __init__(self, rebalance_s: float = 600.0, pow2: bool = True, admission: str = "timeline") -> None:
        super().__init__(rebalance_s)
        if admission not in ("timeline", "instant"):
            raise TrainsimError("elasticflow admission", f"unknown rule {admission!r}", "use timeline or instant")
        self.pow2 = pow2
        self.admission = admission
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
            shares: dict[int, Share | None] = {}
            for js in deadline_jobs:
                shares[js.spec.index] = min_share(js, self.sizes[js.spec.index], view.now)
            for js in deadline_jobs:
                i = js.spec.index
                if i not in self.seen:
                    continue
                sh = shares[i]
                if sh is not None and used + sh.gpus <= cap:
                    alloc[i] = sh.gpus
                    used += sh.gpus
            timeline: Timeline | None = None
            for js in deadline_jobs:
                i = js.spec.index
                if i in self.seen:
                    continue
                self.seen.add(i)
                sh = shares[i]
                s = None if sh is None else sh.gpus
                if self.admission == "instant":
                    if s is None or used + s > cap:
                        view.reject(i, "deadline cannot be met")
                        continue
                else:
                    if timeline is None:
                        timeline = Timeline(view.now, cap, [
                            (sj.end(view.now), sj.gpus) for j in deadline_jobs
                            if j.spec.index in self.seen and j.spec.index != i
                            and (sj := shares[j.spec.index]) is not None and j.spec.index not in view.rejected])
                    plan = timeline.plan(self.sizes[i], js.remaining, js.spec.deadline_s)  # type: ignore[arg-type]
                    if plan is None:
                        view.reject(i, "deadline cannot be met")
                        continue
                    timeline.reserve(plan)
                    if s is None or used + s > cap:
                        continue  # admitted on GPUs that free up later: it waits (or runs on leftovers) until then
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
