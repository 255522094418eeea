"""Helpers of the elastic policies: usable sizes of a job on a pool, minimum satisfactory share, and the greedy
hand-out of leftover GPUs by marginal gain."""

from __future__ import annotations

import heapq
import math

import numpy as np

from trainsim.cluster.policies.base import JobState, Target, View
from trainsim.cluster.spec import Pool


class Sizes:
    """The usable GPU counts of a job on a pool (faster than every smaller one, within its min/max), with times."""

    __slots__ = ("sizes", "times")

    def __init__(self, view: View, js: JobState, pool: Pool) -> None:
        c = view.curve(js.spec, pool)
        lo, hi = js.spec.min_gpus or 1, js.spec.max_gpus or pool.num_gpus
        mask = c.usable & (c.sizes >= lo) & (c.sizes <= hi) & np.isfinite(c.times)
        self.sizes = c.sizes[mask]
        self.times = c.times[mask]

    def min_share(self, remaining: float, time_left: float) -> int | None:
        """Smallest usable size that finishes ``remaining`` iterations within ``time_left`` s (None: none does)."""
        if time_left <= 0:
            return None
        ok = np.flatnonzero(remaining * self.times <= time_left)
        return int(self.sizes[ok[0]]) if ok.size else None

    def next_after(self, n: int) -> tuple[int, float] | None:
        """The next usable size above ``n`` and its iteration time."""
        i = int(np.searchsorted(self.sizes, n, side="right"))
        if i >= len(self.sizes):
            return None
        return int(self.sizes[i]), float(self.times[i])

    def time(self, n: int) -> float:
        """Iteration time at a usable size (``inf`` at 0)."""
        if n == 0:
            return math.inf
        i = int(np.searchsorted(self.sizes, n))
        return float(self.times[i])


def hand_out(view: View, pool: str, free: int, alloc: dict[int, int], sizes: dict[int, Sizes],
             jobs: list[JobState]) -> int:
    """Give ``free`` GPUs to ``jobs`` step by step (to each job's next usable size), best marginal gain first.

    Gain of a step = (throughput after − before) / extra GPUs / remaining iterations (iterations per second per GPU,
    relative to the work left: the step that shortens a job's remaining time the most per GPU). Ties: trace order.
    Returns the GPUs left.
    """
    heap: list[tuple[float, int, int, int]] = []

    def push(js: JobState) -> None:
        i = js.spec.index
        if js.spec.index not in sizes:
            return
        nxt = sizes[i].next_after(alloc.get(i, 0))
        if nxt is None:
            return
        n2, t2 = nxt
        n1 = alloc.get(i, 0)
        t1 = sizes[i].time(n1)
        gain = (1.0 / t2 - (0.0 if n1 == 0 else 1.0 / t1)) / (n2 - n1) / max(js.remaining, 1e-9)
        heapq.heappush(heap, (-gain, i, n2, n2 - n1))

    by_index = {js.spec.index: js for js in jobs}
    for js in jobs:
        push(js)
    while heap and free > 0:
        _g, i, n2, extra = heapq.heappop(heap)
        if extra > free:
            continue  # this step no longer fits; smaller steps of other jobs may
        alloc[i] = n2
        free -= extra
        push(by_index[i])
    return free


def targets(alloc: dict[int, int], pool: str, order: list[int]) -> dict[int, Target]:
    """Targets in ``order`` (running jobs first keeps their nodes stable)."""
    return {i: Target(pool, alloc[i]) for i in order if alloc.get(i, 0) > 0}
