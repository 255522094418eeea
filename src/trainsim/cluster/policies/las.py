"""``las``: Tiresias's discretised two-dimensional least-attained-service (2D-LAS), preemptive.

Rule: a job's attained service is GPUs × time it has held (GPU-seconds). Jobs sit in queues by attained service
(thresholds ``thresholds_gpu_h``, default 100 and 1000 GPU-hours: queue 0 below the first, …); lower queues go
first, FIFO inside a queue (submission time, then trace order); each takes its requested GPUs greedily, skipping
jobs that do not fit; running jobs that lose their place are preempted. The policy re-ranks at every event and at
scheduling ticks every ``tick_s`` (default 600 s) so that jobs crossing a threshold are noticed. Tiresias's
starvation guard (promotion after a long wait) is not modelled.
"""

from __future__ import annotations

import bisect

from trainsim.cluster.policies.base import Policy, Target, View, greedy_rigid, register


@register
class Las(Policy):
    """Discretised 2D-LAS (Tiresias)."""

    name = "las"

    def __init__(self, thresholds_gpu_h: tuple[float, ...] = (100.0, 1000.0), tick_s: float = 600.0) -> None:
        super().__init__()
        self.thresholds = tuple(h * 3600.0 for h in thresholds_gpu_h)
        self.tick_s = tick_s

    def schedule(self, view: View) -> dict[int, Target]:
        """Queues by attained GPU-seconds, FIFO inside."""
        order = sorted(view.jobs, key=lambda j: (bisect.bisect_right(self.thresholds, j.attained_gpu_s),
                                                 j.spec.submit_time_s, j.spec.index))
        return greedy_rigid(view, order, blocking=False, keep_running=False)
