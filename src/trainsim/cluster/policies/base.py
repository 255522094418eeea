"""What a scheduling policy sees and returns, and the registry of policies (one module each).

At every event the engine calls ``policy.schedule(view)``; the policy returns the target allocation
``{job index: Target(pool, gpus)}`` for the jobs that should run now (jobs left out wait or are preempted) and may
reject jobs with ``view.reject(index, reason)``. The engine keeps a running job's nodes when its target is unchanged,
places the others (in the order of the returned mapping) and checks that no pool is over-allocated.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from trainsim.cluster.spec import Pool
    from trainsim.cluster.throughput import Curve, ThroughputModel
    from trainsim.cluster.trace import JobSpec


class Target(NamedTuple):
    """Run a job on ``gpus`` GPUs of pool ``pool`` (its name)."""

    pool: str
    gpus: int


class Clock:
    """The simulation time shared by the job states of one run."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class JobState:
    """The engine's view of one submitted, unfinished job (read-only for policies; computed on access)."""

    __slots__ = ("_clock", "_rec", "spec")

    def __init__(self, spec: JobSpec, rec: Any, clock: Clock) -> None:
        self.spec = spec
        self._rec = rec
        self._clock = clock

    @property
    def remaining(self) -> float:
        """Iterations left now (fractional while running)."""
        rec = self._rec
        left = float(self.spec.iterations - rec.done)
        seg = rec.seg
        return left if seg is None else left - seg.progress(self._clock.now)

    @property
    def pool(self) -> str | None:
        """Pool of the current allocation (None: waiting)."""
        seg = self._rec.seg
        return None if seg is None else seg.pool

    @property
    def gpus(self) -> int:
        """GPUs held now."""
        seg = self._rec.seg
        return 0 if seg is None else seg.gpus

    @property
    def running(self) -> bool:
        """Whether the job holds GPUs."""
        return self._rec.seg is not None

    @property
    def iter_time_s(self) -> float:
        """Current iteration time (straggler slowdown included; ``inf`` while waiting)."""
        seg = self._rec.seg
        return math.inf if seg is None else seg.iter_time

    @property
    def attained_gpu_s(self) -> float:
        """GPU-seconds received so far."""
        rec = self._rec
        seg = rec.seg
        return rec.closed_gpu_s + (0.0 if seg is None else seg.gpus * (self._clock.now - seg.t0))

    @property
    def restart_s(self) -> float:
        """Seconds the job's next (re)start costs before it computes: the resize overhead (nothing on its first
        start, which loads no checkpoint) plus any failure restart penalty."""
        rec = self._rec
        return (0.0 if rec.first_start is None else rec.restart_s) + rec.restart_penalty_s

    @property
    def overhead_left_s(self) -> float:
        """Seconds of its current (re)start overhead a running job still has to pay (0 while waiting)."""
        seg = self._rec.seg
        return 0.0 if seg is None else max(0.0, seg.useful_t0 - self._clock.now)

    @property
    def first_start_s(self) -> float | None:
        """When the job first started."""
        return self._rec.first_start


@dataclass
class View:
    """The state a policy decides on."""

    now: float
    jobs: list[JobState]  # submitted, unfinished, not rejected; in submission order
    pools: list[Pool]
    capacity: dict[str, int]  # GPUs of nodes that are up, per pool
    throughput: ThroughputModel
    rejected: dict[int, str] = field(default_factory=dict)
    curve_of: Callable[[JobSpec, Pool], Curve] | None = None

    def reject(self, index: int, reason: str) -> None:
        """Reject a job (it leaves the system unfinished, with ``reason``)."""
        self.rejected[index] = reason

    def pools_for(self, job: JobSpec) -> list[Pool]:
        """The pools a job may use (its ``pool`` constraint, else all in spec order)."""
        return [p for p in self.pools if job.pool is None or p.name == job.pool]

    def curve(self, job: JobSpec, pool: Pool) -> Curve:
        """The job's iteration-time curve on a pool (memoised by the throughput model)."""
        assert self.curve_of is not None
        return self.curve_of(job, pool)

    def time_at(self, job: JobSpec, pool: Pool, n: int) -> float:
        """Iteration time at ``n`` GPUs, compact placement (``inf`` when nothing fits)."""
        return self.throughput.iteration_time(job, pool, n)


class Policy(ABC):
    """A scheduling policy. Subclasses set ``name``, ``elastic`` and implement :meth:`schedule`."""

    name: str = ""
    elastic: bool = False
    #: seconds between scheduling ticks (``None``: schedule on events only)
    tick_s: float | None = None

    def __init__(self, **options: Any) -> None:
        from trainsim.errors import TrainsimError

        if options:
            raise TrainsimError("--policy", f"{self.name} takes no options {sorted(options)}",
                                "see docs/cluster.md for each policy's options")

    @abstractmethod
    def schedule(self, view: View) -> dict[int, Target]:
        """Target allocation of the jobs to run now."""


POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: add a policy to :data:`POLICIES` under its ``name``."""
    POLICIES[cls.name] = cls
    return cls


# ---- helpers shared by rigid policies ----------------------------------------------------------------------------
def rigid_pool(view: View, job: JobSpec, free: dict[str, int]) -> str | None:
    """The first allowed pool with ``requested_gpus`` free and a fitting plan there."""
    for p in view.pools_for(job):
        if free[p.name] >= job.requested_gpus and math.isfinite(view.time_at(job, p, job.requested_gpus)):
            return p.name
    return None


def greedy_rigid(view: View, order: list[JobState], *, blocking: bool, keep_running: bool) -> dict[int, Target]:
    """Allocate ``requested_gpus`` to jobs in ``order``.

    ``keep_running``: running jobs keep their GPUs first (non-preemptive). ``blocking``: stop at the first waiting
    job that does not fit (strict FIFO); otherwise later jobs that fit go ahead (backfill).
    """
    free = dict(view.capacity)
    out: dict[int, Target] = {}
    if keep_running:
        for js in order:
            pool_name = js.pool
            if pool_name is not None:
                n = js.gpus
                out[js.spec.index] = Target(pool_name, n)
                free[pool_name] -= n
    most = max(free.values())
    for js in order:
        i = js.spec.index
        if i in out:
            continue
        if js.spec.requested_gpus > most:  # fits nowhere now: skip without looking at pools
            if blocking:
                break
            continue
        pool = rigid_pool(view, js.spec, free)
        if pool is None:
            if blocking:
                break
            continue
        out[i] = Target(pool, js.spec.requested_gpus)
        free[pool] -= js.spec.requested_gpus
        most = max(free.values())
        if most == 0:
            break
    return out
