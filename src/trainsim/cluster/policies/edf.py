"""``edf``: earliest deadline first on the requested GPU count, preemptive.

Rule: every event, jobs are ordered by deadline (jobs without one last), ties by submission time then trace order;
each takes its requested GPUs on the first allowed pool with room, skipping jobs that do not fit (so a later job may
run ahead of one that is too large for what is left). A running job that loses its place is preempted.
"""

from __future__ import annotations

import math

from trainsim.cluster.policies.base import Policy, Target, View, greedy_rigid, register


@register
class Edf(Policy):
    """Earliest deadline first."""

    name = "edf"

    def schedule(self, view: View) -> dict[int, Target]:
        """Re-rank by deadline every event."""
        order = sorted(view.jobs, key=lambda j: (j.spec.deadline_s if j.spec.deadline_s is not None else math.inf,
                                                  j.spec.submit_time_s, j.spec.index))
        return greedy_rigid(view, order, blocking=False, keep_running=False)
