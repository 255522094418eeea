"""``themis``: finish-time fairness (Themis, NSDI'20), rigid sizes, preemptive with leases.

Rule: a job's finish-time fairness estimate is ρ = (time since submission + remaining time on its requested GPUs)
/ (its whole work on its requested GPUs alone). At each lease boundary (every ``lease_s``, default 1800 s) and when
jobs arrive or finish, jobs are ranked by ρ, worst off (largest ρ) first, ties by submission time then trace order,
and take their requested GPUs greedily. Between lease boundaries running jobs keep their GPUs (only free GPUs are
handed out), so preemptions happen at lease ends. Themis's partial-allocation auction is simplified to this greedy
ranking.
"""

from __future__ import annotations

import math

from trainsim.cluster.policies.base import Policy, Target, View, greedy_rigid, register
from trainsim.cluster.policies.sjf import predicted_time


@register
class Themis(Policy):
    """Finish-time fairness with leases."""

    name = "themis"

    def __init__(self, lease_s: float = 1800.0) -> None:
        super().__init__()
        self.tick_s = lease_s
        self.next_lease = 0.0

    def schedule(self, view: View) -> dict[int, Target]:
        """Worst finish-time fairness first; preempt only at lease boundaries."""
        def rho(j):  # type: ignore[no-untyped-def]
            alone = predicted_time(view, j, False)
            return (view.now - j.spec.submit_time_s + predicted_time(view, j, True)) / alone if alone > 0 \
                else math.inf

        order = sorted(view.jobs, key=lambda j: (-rho(j), j.spec.submit_time_s, j.spec.index))
        lease_end = view.now >= self.next_lease
        if lease_end:
            self.next_lease = view.now + (self.tick_s or 0.0)
        return greedy_rigid(view, order, blocking=False, keep_running=not lease_end)
