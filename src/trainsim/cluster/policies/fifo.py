"""``fifo``: first come, first served on the requested GPU count, non-preemptive.

Rule: running jobs keep their GPUs; waiting jobs start in submission order (ties: trace order). Without backfill
the queue blocks at the first job that does not fit; ``backfill=True`` (policy ``fifo-backfill``) lets later jobs
that fit start ahead of it.
"""

from __future__ import annotations

from trainsim.cluster.policies.base import Policy, Target, View, greedy_rigid, register


@register
class Fifo(Policy):
    """First in, first out; blocking."""

    name = "fifo"
    backfill = False

    def schedule(self, view: View) -> dict[int, Target]:
        """Running jobs first, then the queue in order."""
        return greedy_rigid(view, view.jobs, blocking=not self.backfill, keep_running=True)


@register
class FifoBackfill(Fifo):
    """First in, first out with backfilling."""

    name = "fifo-backfill"
    backfill = True
