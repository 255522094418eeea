"""``sjf``: shortest job first on the requested GPU count, non-preemptive.

Rule: running jobs keep their GPUs; waiting jobs start in order of predicted duration (iterations × iteration time
on the requested GPUs of their first allowed pool, from the throughput model), ties by submission time then trace
order; a job that does not fit is skipped (later, shorter-or-equal jobs may start).
"""

from __future__ import annotations

from trainsim.cluster.policies.base import JobState, Policy, Target, View, greedy_rigid, register


def predicted_time(view: View, js: JobState, remaining: bool) -> float:
    """Seconds the job needs on its requested GPUs (all work, or what remains)."""
    pool = view.pools_for(js.spec)[0]
    work = js.remaining if remaining else js.spec.iterations
    return work * view.time_at(js.spec, pool, js.spec.requested_gpus)


@register
class Sjf(Policy):
    """Shortest job first."""

    name = "sjf"

    def schedule(self, view: View) -> dict[int, Target]:
        """Running jobs first, then waiting jobs by predicted duration."""
        order = sorted(view.jobs, key=lambda j: (predicted_time(view, j, False), j.spec.submit_time_s, j.spec.index))
        return greedy_rigid(view, order, blocking=False, keep_running=True)
