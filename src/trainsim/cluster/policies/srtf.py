"""``srtf``: shortest remaining time first on the requested GPU count, preemptive.

Rule: every event, jobs are ordered by remaining time (iterations left × iteration time on the requested GPUs),
ties by submission time then trace order, and take their GPUs greedily (skipping jobs that do not fit); a running
job that loses its place is preempted (checkpoint restart later).
"""

from __future__ import annotations

from trainsim.cluster.policies.base import Policy, Target, View, greedy_rigid, register
from trainsim.cluster.policies.sjf import predicted_time


@register
class Srtf(Policy):
    """Shortest remaining time first."""

    name = "srtf"

    def schedule(self, view: View) -> dict[int, Target]:
        """Re-rank by remaining time every event."""
        order = sorted(view.jobs, key=lambda j: (predicted_time(view, j, True), j.spec.submit_time_s, j.spec.index))
        return greedy_rigid(view, order, blocking=False, keep_running=False)
