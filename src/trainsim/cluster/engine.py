"""The deterministic event loop of the cluster simulator.

Events (processed in time order; at equal times: completions, repairs, straggler ends, failures, straggler onsets,
arrivals, ticks, then insertion order): after all events of one instant the policy returns the target allocation,
the engine stops the jobs whose target changed, places the others on nodes (:mod:`~trainsim.cluster.placement`),
and asserts its invariants (no node or pool over-allocated, GPUs held = GPUs placed, iterations conserved).

Work is counted in whole iterations. Between events a running job advances at one iteration per
``iteration_time_s`` after its (re)start overhead; when it is stopped (preempted, resized, hit by a failure) the
iteration in progress is lost; when only its speed changes (a straggler starts or ends on one of its nodes) the
fraction done is carried over. So, exactly: the iterations of a job's allocation rows add up to its iteration count.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainsim.cluster.placement import format_nodes, place, shape_gpus_per_node
from trainsim.cluster.policies.base import Clock, JobState, Policy, Target, View
from trainsim.cluster.predictor_adapter import PlanPoint
from trainsim.cluster.rng import substream
from trainsim.cluster.spec import ClusterSpec, Pool
from trainsim.cluster.throughput import Curve, OverheadModel, ThroughputModel
from trainsim.cluster.trace import JobSpec
from trainsim.errors import TrainsimError

# event kinds, in processing order at equal times
COMPLETION, REPAIR, STRAGGLER_END, FAILURE, STRAGGLER_START, ARRIVAL, TICK = range(7)
HOUR = 3600.0
DAY = 86400.0


@dataclass(slots=True)
class Segment:
    """A job's current allocation."""

    pool: str
    placement: dict[int, int]
    gpus: int
    point: PlanPoint
    base_time: float
    factor: float
    t0: float
    useful_t0: float
    carry: float
    overhead_s: float
    nodes: np.ndarray  # node indices of the placement (ascending)
    counts: np.ndarray  # GPUs on each

    @property
    def iter_time(self) -> float:
        """Seconds per iteration now."""
        return self.base_time * self.factor

    def progress(self, t: float) -> float:
        """Iterations (fractional) completed in this segment by ``t``, the carried fraction included."""
        if t <= self.useful_t0:
            return self.carry
        return (t - self.useful_t0) / (self.base_time * self.factor) + self.carry


@dataclass(slots=True)
class JobRecord:
    """Everything the engine tracks about one job."""

    spec: JobSpec
    state: JobState
    done: int = 0
    seg: Segment | None = None
    version: int = 0
    submitted: bool = False
    finished: bool = False
    rejected: str | None = None
    first_start: float | None = None
    end: float | None = None
    starts: int = 0
    restart_penalty_s: float = 0.0
    #: seconds every restart after the first start costs (the overhead model for this job's model)
    restart_s: float = 0.0
    closed_gpu_s: float = 0.0
    plans: list[str] = field(default_factory=list)


@dataclass
class SimulationResult:
    """Per-job records and allocation rows (as lists; see :mod:`trainsim.cluster.outputs` for the tables)."""

    jobs: list[JobRecord]
    rows: list[tuple[Any, ...]]
    horizon_s: float
    events: int
    cluster: ClusterSpec
    throughput: ThroughputModel
    policy: str


ALLOCATION_COLUMNS = ("job_id", "t0_s", "t1_s", "pool", "nodes", "gpus", "tp", "pp", "dp", "iter_time_s",
                      "iterations", "overhead_s", "useful_s")


class Engine:
    """One simulation run. Use :func:`trainsim.cluster.simulate` rather than this class directly."""

    def __init__(self, jobs: list[JobSpec], cluster: ClusterSpec, policy: Policy, throughput: ThroughputModel,
                 overhead: OverheadModel, seed: int = 0, until_s: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.specs = jobs
        self.cluster = cluster
        self.policy = policy
        self.tm = throughput
        self.overhead = overhead
        self.seed = seed
        self.until = until_s
        self.progress = progress
        self.pools: dict[str, Pool] = {p.name: p for p in cluster.pools}
        self.cap = {p.name: np.full(p.nodes, p.gpn, dtype=np.int64) for p in cluster.pools}
        self.used = {p.name: np.zeros(p.nodes, dtype=np.int64) for p in cluster.pools}
        self.slow = {p.name: np.ones(p.nodes, dtype=float) for p in cluster.pools}
        self.held = {p.name: 0 for p in cluster.pools}
        self.clock = Clock()
        self.records = [JobRecord(s, None) for s in jobs]  # type: ignore[arg-type]
        restart: dict[str, float] = {}
        for rec in self.records:
            rec.state = JobState(rec.spec, rec, self.clock)
            name = rec.spec.model
            if name not in restart:
                restart[name] = overhead.seconds(throughput.model(name), first_start=False)
            rec.restart_s = restart[name]
        #: O(running jobs) cross-checks at every event on runs of this size or smaller (node checks always)
        self.paranoid = len(jobs) <= 2000
        self.active: dict[int, JobRecord] = {}  # arrival order = trace order
        self.running: dict[int, JobRecord] = {}
        self.rows: list[tuple[Any, ...]] = []
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.events = 0
        self._curves: dict[tuple[Any, str], Curve] = {}
        self._extra = {s.index: tuple(x for x in (s.requested_gpus, s.min_gpus, s.max_gpus) if x) for s in jobs}

    # ---- events -------------------------------------------------------------------------------------------------
    def push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        """Schedule an event."""
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, a, b))

    def curve(self, job: JobSpec, pool: Pool) -> Curve:
        """The job's curve on a pool, including its own sizes."""
        return self.tm.curve(job, pool, self._extra[job.index])

    # ---- segments -----------------------------------------------------------------------------------------------
    def _close(self, rec: JobRecord, t: float, *, completed: bool, keep_carry: bool) -> float:
        """End the current segment at ``t``; return the carried fraction of an iteration."""
        seg = rec.seg
        assert seg is not None
        left = rec.spec.iterations - rec.done
        x = seg.progress(t)
        if completed:
            k = left
            carry = 0.0
        else:
            k = min(math.floor(x), left - 1)
            carry = x - k if keep_carry else 0.0
        if t > seg.t0:
            if completed and seg.carry == 0.0:
                useful = max(0.0, t - seg.useful_t0)
            else:
                useful = max(0.0, (k - seg.carry + (carry if keep_carry else 0.0)) * seg.iter_time)
            useful = min(useful, t - seg.t0)
            p = seg.point
            self.rows.append((rec.spec.job_id, seg.t0, t, seg.pool, format_nodes(seg.placement), seg.gpus, p.tp, p.pp,
                              p.dp, seg.iter_time, k, min(seg.overhead_s, t - seg.t0), useful))
            rec.closed_gpu_s += seg.gpus * (t - seg.t0)
        rec.done += k
        return carry

    def _release(self, rec: JobRecord) -> None:
        seg = rec.seg
        assert seg is not None
        self.used[seg.pool][seg.nodes] -= seg.counts
        self.held[seg.pool] -= seg.gpus
        rec.seg = None
        rec.version += 1
        del self.running[rec.spec.index]

    def _factor(self, rec: JobRecord, pool: str, placement: dict[int, int], point: PlanPoint) -> float:
        worst = float(self.slow[pool][np.fromiter(placement, dtype=np.int64, count=len(placement))].max())
        if worst == 1.0:
            return 1.0
        return self.tm.slowdown(rec.spec, self.pools[pool], point, worst)

    def _schedule_completion(self, rec: JobRecord) -> None:
        seg = rec.seg
        assert seg is not None
        left = rec.spec.iterations - rec.done
        t_end = seg.useful_t0 + (left - seg.carry) * seg.iter_time
        self.push(max(t_end, seg.t0), COMPLETION, rec.spec.index, rec.version)

    def _start(self, rec: JobRecord, target: Target, t: float) -> bool:
        pool = self.pools[target.pool]
        free = self.cap[target.pool] - self.used[target.pool]
        placement = place(free, target.gpus, pool.gpn, self.cluster.topology.nodes_per_rack)
        if placement is None:
            raise AssertionError(f"policy {self.policy.name} over-allocated pool {target.pool} at t={t}")
        point = self.tm.point(rec.spec, pool, target.gpus, shape_gpus_per_node(placement))
        if point is None:  # no plan fits this fragmented shape: the job waits for the next event
            return False
        first = rec.first_start is None
        over = rec.state.restart_s  # the overhead model's cost (none on the first start) + a failure's penalty
        rec.restart_penalty_s = 0.0
        nodes = np.fromiter(placement, dtype=np.int64, count=len(placement))
        counts = np.fromiter(placement.values(), dtype=np.int64, count=len(placement))
        self.used[target.pool][nodes] += counts
        self.held[target.pool] += target.gpus
        factor = self._factor(rec, target.pool, placement, point)
        rec.seg = Segment(target.pool, placement, target.gpus, point, point.iteration_time_s, factor, t, t + over,
                          0.0, over, nodes, counts)
        rec.version += 1
        rec.starts += 1
        self.running[rec.spec.index] = rec
        if first:
            rec.first_start = t
        if not rec.plans or rec.plans[-1] != point.plan:
            rec.plans.append(point.plan)
        self._schedule_completion(rec)
        return True

    def _respeed(self, rec: JobRecord, t: float) -> None:
        """A straggler began or ended on one of the job's nodes: new segment, same nodes, fraction carried."""
        seg = rec.seg
        assert seg is not None
        factor = self._factor(rec, seg.pool, seg.placement, seg.point)
        if factor == seg.factor:
            return
        carry = self._close(rec, t, completed=False, keep_carry=True)
        rest = max(0.0, seg.useful_t0 - t)
        rec.seg = Segment(seg.pool, seg.placement, seg.gpus, seg.point, seg.base_time, factor, t, t + rest, carry,
                          rest, seg.nodes, seg.counts)
        rec.version += 1
        self._schedule_completion(rec)

    # ---- invariants ---------------------------------------------------------------------------------------------
    def check(self, t: float) -> None:
        """Assert the engine's invariants (called after every event)."""
        for name in self.cap:
            used, cap = self.used[name], self.cap[name]
            if (used < 0).any() or (used > cap).any():
                raise AssertionError(f"t={t}: a node of pool {name} is over-allocated")
            if int(used.sum()) != self.held[name]:
                raise AssertionError(f"t={t}: pool {name} GPUs placed {int(used.sum())} != held {self.held[name]}")

    def _check_jobs(self) -> None:
        held = dict.fromkeys(self.cap, 0)
        for rec in self.running.values():
            seg = rec.seg
            if seg is None:
                raise AssertionError(f"job {rec.spec.job_id}: running without an allocation")
            held[seg.pool] += seg.gpus
            if int(seg.counts.sum()) != seg.gpus or sum(seg.placement.values()) != seg.gpus:
                raise AssertionError(f"job {rec.spec.job_id}: placement does not hold its GPUs")
            if not 0 <= rec.done < rec.spec.iterations:
                raise AssertionError(f"job {rec.spec.job_id}: iterations done out of range")
        if held != self.held:
            raise AssertionError(f"GPUs held by jobs {held} != pools' {self.held}")

    # ---- random processes -----------------------------------------------------------------------------------
    def _init_random(self) -> None:
        f, s = self.cluster.failures, self.cluster.stragglers
        self._node_ids: list[tuple[str, int]] = [(p.name, k) for p in self.cluster.pools for k in range(p.nodes)]
        if f is not None:
            self._rng_f = substream(self.seed, "failures")
            draws = self._rng_f.exponential(f.node_mtbf_h * HOUR, size=len(self._node_ids))
            for i, d in enumerate(draws):
                self.push(float(d), FAILURE, i)
        if s is not None:
            self._rng_s = substream(self.seed, "stragglers")
            draws = self._rng_s.exponential(DAY / s.rate_per_node_day, size=len(self._node_ids))
            for i, d in enumerate(draws):
                self.push(float(d), STRAGGLER_START, i)

    def _jobs_on(self, pool: str, node: int) -> list[JobRecord]:
        return [r for r in self.running.values() if r.seg is not None and r.seg.pool == pool
                and node in r.seg.placement]

    def _failure(self, i: int, t: float) -> None:
        f = self.cluster.failures
        assert f is not None
        pool, node = self._node_ids[i]
        for rec in sorted(self._jobs_on(pool, node), key=lambda r: r.spec.index):
            self._close(rec, t, completed=False, keep_carry=False)
            self._release(rec)
            rec.restart_penalty_s = f.restart_s
        self.cap[pool][node] = 0
        self.push(t + f.repair_h * HOUR, REPAIR, i)

    def _repair(self, i: int, t: float) -> None:
        f = self.cluster.failures
        assert f is not None
        pool, node = self._node_ids[i]
        self.cap[pool][node] = self.pools[pool].gpn
        self.push(t + float(self._rng_f.exponential(f.node_mtbf_h * HOUR)), FAILURE, i)

    def _straggle(self, i: int, t: float, start: bool) -> None:
        s = self.cluster.stragglers
        assert s is not None
        pool, node = self._node_ids[i]
        if start:
            self.push(t + float(self._rng_s.exponential(DAY / s.rate_per_node_day)), STRAGGLER_START, i)
            if self.slow[pool][node] != 1.0:
                return  # already straggling: the onset is absorbed
            self.slow[pool][node] = s.slowdown
            self.push(t + s.duration_h * HOUR, STRAGGLER_END, i)
        else:
            self.slow[pool][node] = 1.0
        for rec in sorted(self._jobs_on(pool, node), key=lambda r: r.spec.index):
            self._respeed(rec, t)

    # ---- policy -------------------------------------------------------------------------------------------------
    def _view(self, t: float) -> View:
        self.clock.now = t
        states = [rec.state for rec in self.active.values()]
        capacity = {name: int(c.sum()) for name, c in self.cap.items()}
        return View(t, states, list(self.cluster.pools), capacity, self.tm, curve_of=self.curve)

    def _apply(self, targets: dict[int, Target], view: View, t: float) -> None:
        for idx, reason in sorted(view.rejected.items()):
            rec = self.records[idx]
            if rec.seg is not None:
                self._close(rec, t, completed=False, keep_carry=False)
                self._release(rec)
            rec.rejected = reason
            rec.end = None
            del self.active[idx]
        per_pool = dict.fromkeys(self.cap, 0)
        for idx, tg in targets.items():
            if idx not in self.active:
                raise AssertionError(f"policy {self.policy.name} allocated an inactive job {idx}")
            if tg.pool not in self.pools or tg.gpus <= 0:
                raise AssertionError(f"policy {self.policy.name} returned an invalid target {tg}")
            per_pool[tg.pool] += tg.gpus
        for name, n in per_pool.items():
            if n > int(self.cap[name].sum()):
                raise AssertionError(f"policy {self.policy.name} asked {n} GPUs of pool {name} at t={t}, "
                                     f"{int(self.cap[name].sum())} are up")
        for idx in sorted(self.running):
            rec = self.running[idx]
            seg = rec.seg
            assert seg is not None
            tg = targets.get(idx)
            if tg is None or tg.pool != seg.pool or tg.gpus != seg.gpus:
                self._close(rec, t, completed=False, keep_carry=False)
                self._release(rec)
        for idx, tg in targets.items():
            rec = self.active[idx]
            if rec.seg is None:
                self._start(rec, tg, t)

    # ---- main loop ----------------------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        """Simulate until every job finished or was rejected (or ``until_s``)."""
        for s in self.specs:
            self.push(s.submit_time_s, ARRIVAL, s.index)
        self._init_random()
        total = len(self.specs)
        finished = 0
        arrivals_left = total
        t = 0.0
        tick = self.policy.tick_s
        tick_pending = False
        while self.heap:
            t = self.heap[0][0]
            if self.until is not None and t > self.until:
                t = self.until
                break
            changed = False
            while self.heap and self.heap[0][0] == t:
                _, kind, _, a, b = heapq.heappop(self.heap)
                self.events += 1
                if kind == COMPLETION:
                    rec = self.records[a]
                    if rec.version != b or rec.seg is None:
                        continue
                    self._close(rec, t, completed=True, keep_carry=False)
                    self._release(rec)
                    rec.finished = True
                    rec.end = t
                    del self.active[a]
                    finished += 1
                    changed = True
                elif kind == ARRIVAL:
                    rec = self.records[a]
                    rec.submitted = True
                    self.active[a] = rec
                    arrivals_left -= 1
                    changed = True
                elif kind == FAILURE:
                    if self.active or arrivals_left:
                        self._failure(a, t)
                        changed = True
                elif kind == REPAIR:
                    self._repair(a, t)
                    changed = True
                elif kind == STRAGGLER_START:
                    if self.active or arrivals_left:
                        self._straggle(a, t, True)
                elif kind == STRAGGLER_END:
                    self._straggle(a, t, False)
                elif kind == TICK:
                    tick_pending = False
                    changed = True
                self.check(t)
            if changed and self.active:
                view = self._view(t)
                targets = self.policy.schedule(view)
                self._apply(targets, view, t)
                self.check(t)
                if self.paranoid:
                    self._check_jobs()
                if tick is not None and not tick_pending and self.active:
                    self.push(t + tick, TICK)
                    tick_pending = True
            if self.progress is not None:
                self.progress(finished + sum(1 for r in self.records if r.rejected), total)
            if not self.active and not arrivals_left:
                break
            if self.active and not self.running and not arrivals_left \
                    and not self._pending_external():
                stuck = min(self.active)
                raise TrainsimError(f"trace job {self.records[stuck].spec.job_id}",
                                    f"policy {self.policy.name} can never start it on this cluster",
                                    "check requested_gpus, min_gpus and the pool against the cluster")
        for rec in list(self.active.values()):
            if rec.seg is not None:
                self._close(rec, t, completed=False, keep_carry=False)
                self._release(rec)
        return SimulationResult(self.records, self.rows, t, self.events, self.cluster, self.tm, self.policy.name)

    def _pending_external(self) -> bool:
        """Whether an event that can change capacity or trigger scheduling is still due (repair or tick)."""
        return any(kind in (REPAIR, TICK) for _, kind, _, _, _ in self.heap)
