"""Helpers of the elastic policies: usable sizes of a job on a pool, minimum satisfactory share, and the greedy
hand-out of leftover GPUs by marginal gain."""

from __future__ import annotations

import bisect
import heapq
import math
from typing import NamedTuple

import numpy as np

from trainsim.cluster.policies.base import JobState, Policy, Target, View
from trainsim.cluster.spec import Pool


class RebalancingPolicy(Policy):
    """An elastic policy that admits jobs on arrival and re-plans every allocation once per ``rebalance_s``."""

    elastic = True

    def __init__(self, rebalance_s: float = 600.0) -> None:
        super().__init__()
        self.tick_s = rebalance_s
        self.next_rebalance = 0.0
        self.seen: set[int] = set()

    def rebalance_due(self, view: View) -> bool:
        """Whether this event is a rebalancing tick (and, if so, schedule the next one)."""
        if view.now < self.next_rebalance:
            return False
        self.next_rebalance = view.now + (self.tick_s or 0.0)
        return True


class Sizes:
    """The usable GPU counts of a job on a pool (faster than every smaller one, within its min/max), with times.

    ``pow2``: only powers of two (ElasticFlow's buddy allocation); the usable rule is applied among those.
    """

    __slots__ = ("_neg_times", "_size_list", "_time_list", "sizes", "times")

    def __init__(self, view: View, js: JobState, pool: Pool, pow2: bool = False) -> None:
        c = view.curve(js.spec, pool)
        lo, hi = js.spec.min_gpus or 1, js.spec.max_gpus or pool.num_gpus
        sizes, times = c.sizes, c.times
        if pow2:
            keep = (sizes & (sizes - 1)) == 0
            sizes, times = sizes[keep], times[keep]
        prior = np.minimum.accumulate(np.concatenate(([np.inf], times)))[:-1]
        mask = (times < prior) & (sizes >= lo) & (sizes <= hi) & np.isfinite(times)
        self.sizes = sizes[mask]
        self.times = times[mask]
        self._size_list = [int(x) for x in self.sizes]
        self._time_list = [float(x) for x in self.times]
        self._neg_times = [-x for x in self._time_list]  # ascending: usable times strictly decrease with size

    def min_share(self, remaining: float, time_left: float) -> int | None:
        """Smallest usable size that finishes ``remaining`` iterations within ``time_left`` s (None: none does)."""
        if time_left <= 0 or not self._size_list:
            return None
        if remaining <= 0:
            return self._size_list[0]
        i = bisect.bisect_left(self._neg_times, -time_left / remaining)
        while i < len(self._time_list) and remaining * self._time_list[i] > time_left:
            i += 1  # guard the division's rounding: the product is the rule
        while i > 0 and remaining * self._time_list[i - 1] <= time_left:
            i -= 1
        return self._size_list[i] if i < len(self._size_list) else None

    def next_after(self, n: int) -> tuple[int, float] | None:
        """The next usable size above ``n`` and its iteration time."""
        i = bisect.bisect_right(self._size_list, n)
        if i >= len(self._size_list):
            return None
        return self._size_list[i], self._time_list[i]

    def time(self, n: int) -> float:
        """Iteration time at a usable size (``inf`` at 0)."""
        if n == 0:
            return math.inf
        return self._time_list[bisect.bisect_left(self._size_list, n)]


class Share(NamedTuple):
    """A deadline job's minimum satisfactory share now: ``gpus`` at ``iter_time_s``, computing ``iterations`` after
    ``delay_s`` of (re)start overhead."""

    gpus: int
    iter_time_s: float
    iterations: float
    delay_s: float

    def end(self, now: float) -> float:
        """When the job would finish at this share."""
        return now + self.delay_s + self.iterations * self.iter_time_s


def min_share(js: JobState, sizes: Sizes, now: float) -> Share | None:
    """The smallest share that still finishes ``js`` by its deadline, restart costs included (None: none does).

    A job that changes size pays a restart (:attr:`JobState.restart_s`: the resize overhead, none on a first start)
    and, when it is running, loses the iteration in progress. So a running job keeps its current size when that
    meets the deadline and no smaller size does once the restart is paid; it is shrunk only to a size that meets the
    deadline with the restart, and grown (restart paid) only when its current size misses. Both throughput sources
    pay the same overhead (it depends on the model, not on the plan).
    """
    deadline = js.spec.deadline_s
    if deadline is None:
        return None
    left = deadline - now
    delay = js.restart_s
    if not js.running:
        rem = js.remaining
        n = sizes.min_share(rem, left - delay)
        return None if n is None else Share(n, sizes.time(n), rem, delay)
    rem_now = js.remaining
    stay = Share(js.gpus, js.iter_time_s, rem_now, js.overhead_left_s)
    moved = float(math.ceil(rem_now - 1e-9))  # the iteration in progress is lost when the job stops
    n = sizes.min_share(moved, left - delay)
    if stay.end(now) <= deadline and (n is None or n >= js.gpus):
        return stay
    return None if n is None else Share(n, sizes.time(n), moved, delay)


def hand_out(view: View, pool: str, free: int, alloc: dict[int, int], sizes: dict[int, Sizes],
             jobs: list[JobState]) -> int:
    """Give ``free`` GPUs to ``jobs`` step by step (to each job's next usable size), ElasticFlow's order: starting a
    waiting job first, then the step with the smallest marginal GPU-time (its ``marginal_gputime``): the change of
    the GPU-time the job's remaining work takes, ``R · (n2·t2 − n1·t1)``, per added GPU ``n2 − n1`` (0 for linear
    scaling; it grows with poor scaling and with the remaining work ``R``, so short jobs are sped up first). Starting
    a waiting job costs ``R · t2`` per GPU (its remaining time). A running job's step is skipped (to its next size)
    while the restart it costs would make the job finish later than at its current size. Ties: trace order. Returns
    the GPUs left.
    """
    heap: list[tuple[int, float, int, int, int]] = []
    state = {js.spec.index: js for js in jobs}
    remaining = {i: max(js.remaining, 0.0) for i, js in state.items()}

    def pays_off(js: JobState, n1: int, n2: int, t2: float) -> bool:
        """Whether moving from ``n1`` to ``n2`` GPUs is worth it. Only a running job kept at its current size pays a
        restart for growing (a waiting job starts anyway, a job already resized restarts anyway, and returning to
        the current size costs nothing); it grows only if it then finishes sooner than where it is, restart and
        the lost iteration in progress included (ElasticFlow resizes at no cost; with checkpoint restarts, growing
        a job that is nearly done would delay it)."""
        cur = js.gpus
        if cur == 0 or n2 == cur or n1 != cur:
            return True
        r = remaining[js.spec.index]
        return js.restart_s + math.ceil(r - 1e-9) * t2 < js.overhead_left_s + r * js.iter_time_s

    def push(i: int) -> None:
        if i not in sizes:
            return
        s = sizes[i]
        n1 = alloc.get(i, 0)
        nxt = s.next_after(n1)
        while nxt is not None and not pays_off(state[i], n1, *nxt):
            nxt = s.next_after(nxt[0])
        if nxt is None:
            return
        n2, t2 = nxt
        r = remaining[i]
        if n1 == 0:
            heapq.heappush(heap, (0, r * t2, i, n2, n2))
        else:
            heapq.heappush(heap, (1, r * (n2 * t2 - n1 * s.time(n1)) / (n2 - n1), i, n2, n2 - n1))

    for js in jobs:
        push(js.spec.index)
    while heap and free > 0:
        _k, _g, i, n2, extra = heapq.heappop(heap)
        if extra > free:
            continue  # this step no longer fits; smaller steps of other jobs may
        alloc[i] = n2
        free -= extra
        push(i)
    return free


def targets(alloc: dict[int, int], pool: str, order: list[int]) -> dict[int, Target]:
    """Targets in ``order`` (running jobs first keeps their nodes stable)."""
    return {i: Target(pool, alloc[i]) for i in order if alloc.get(i, 0) > 0}


class Timeline:
    """Free GPUs of one pool over future time (a step function from ``now``), for ElasticFlow's admission control.

    Built from reservations ``(end_s, gpus)`` that all start now (the admitted deadline jobs at their current minimum
    satisfactory shares); :meth:`plan` fits a new job into it and :meth:`reserve` books the plan.
    """

    __slots__ = ("free", "now", "t")

    def __init__(self, now: float, capacity: int, reservations: list[tuple[float, int]]) -> None:
        live = sorted((e, g) for e, g in reservations if e > now and g > 0)
        held = sum(g for _, g in live)
        self.now = now
        self.t = [now]
        self.free = [capacity - held]
        for end, g in live:
            held -= g
            if end == self.t[-1]:
                self.free[-1] = capacity - held
            else:
                self.t.append(end)
                self.free.append(capacity - held)

    def _split(self, x: float) -> int:
        """Index of the step starting at ``x`` (inserted if needed; ``x`` ≥ now)."""
        i = bisect.bisect_right(self.t, x) - 1
        if self.t[i] == x:
            return i
        self.t.insert(i + 1, x)
        self.free.insert(i + 1, self.free[i])
        return i + 1

    def reserve(self, segments: list[tuple[float, float, int]]) -> None:
        """Book ``(start, end, gpus)`` segments."""
        for a, b, n in segments:
            i, j = self._split(a), self._split(b)
            for k in range(i, j):
                self.free[k] -= n

    def plan(self, sizes: Sizes, remaining: float, deadline: float) -> list[tuple[float, float, int]] | None:
        """ElasticFlow's admission plan (its ``ef_sim_allocation``): the smallest quota ``q`` (a usable size) such that
        running at the largest usable size ≤ min(q, free GPUs) in every step, filled backwards from the deadline,
        finishes ``remaining`` iterations by ``deadline``; ``None`` when no quota does. Returns the booked segments.
        """
        size_list = sizes._size_list
        if not size_list or deadline <= self.now:
            return None
        if remaining <= 0:
            return []
        last = bisect.bisect_left(self.t, deadline) - 1  # step containing the instant just before the deadline
        for q in size_list:
            done = 0.0
            segs: list[tuple[float, float, int]] = []
            for k in range(last, -1, -1):
                a = self.t[k]
                b = min(self.t[k + 1] if k + 1 < len(self.t) else math.inf, deadline)
                cap = min(q, self.free[k])
                j = bisect.bisect_right(size_list, cap) - 1
                if j < 0 or b <= a:
                    continue
                n, t_iter = size_list[j], sizes._time_list[j]
                gain = (b - a) / t_iter
                if done + gain >= remaining:
                    segs.append((b - (remaining - done) * t_iter, b, n))
                    return segs[::-1]
                done += gain
                segs.append((a, b, n))
        return None
