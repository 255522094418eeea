"""Timing of an execution graph for given task durations, vectorised over replicas and steps.

Every stream of the graph runs its tasks in a fixed order (the schedule's order, NCCL's FIFO per communicator), so
for fixed durations the discrete-event simulation reduces to earliest start times over the dependency graph: a task
starts when all its predecessors (or the given fraction of them) are done, collectives of several replicas when the
last member arrives. Tasks are stored in level order (each level depends only on earlier ones), so one level is a
handful of numpy operations on a ``[tasks, columns]`` block; columns are replica classes × simulated steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainsim.graph.build import Graph


@dataclass
class Times:
    """Start and end of every task in every column; ``arrive`` is the per-column ready time of collective tasks
    (before waiting for the other replicas; equal to ``start`` elsewhere)."""

    start: np.ndarray
    end: np.ndarray
    arrive: np.ndarray


class Evaluator:
    """Evaluates one graph repeatedly (the contention fixed point re-times it with updated durations)."""

    def __init__(self, graph: Graph, steps: int, replicas: int) -> None:
        self.g = graph
        self.steps = steps
        self.replicas = replicas
        lv = graph.levels
        self.bounds = list(zip(lv[:-1].tolist(), lv[1:].tolist(), strict=True))
        ptr = graph.pred_ptr
        frac = graph.pred_frac
        self.partial = np.zeros(len(self.bounds), dtype=bool)
        self.has_sync = np.zeros(len(self.bounds), dtype=bool)
        self.has_endc = np.zeros(len(self.bounds), dtype=bool)
        for i, (lo, hi) in enumerate(self.bounds):
            self.partial[i] = bool((frac[ptr[lo]:ptr[hi]] != 1.0).any())
            self.has_sync[i] = bool(graph.sync[lo:hi].any())
            self.has_endc[i] = graph.endc_ptr[hi] > graph.endc_ptr[lo]

    def run(self, dur: np.ndarray) -> Times:
        """Start/end of every task for durations ``dur`` (``[tasks, columns]``)."""
        g = self.g
        n, cols = dur.shape
        start = np.zeros((n, cols))
        end = np.zeros((n, cols))
        arrive = start  # replaced below if any collective synchronises replicas
        if g.sync.any():
            arrive = np.zeros((n, cols))
        ptr, idx, frac = g.pred_ptr, g.pred_idx, g.pred_frac
        eptr, eidx, efrac = g.endc_ptr, g.endc_idx, g.endc_frac
        S, R = self.steps, self.replicas
        for li, (lo, hi) in enumerate(self.bounds):
            plo, phi = ptr[lo], ptr[hi]
            if phi > plo:
                p_idx = idx[plo:phi]
                val = end[p_idx]
                if self.partial[li]:
                    f = frac[plo:phi, None]
                    s0 = start[p_idx]
                    val = s0 + f * (val - s0)
                counts = ptr[lo + 1:hi + 1] - ptr[lo:hi]
                if (counts > 0).all():
                    ready = np.maximum.reduceat(val, ptr[lo:hi] - plo, axis=0)
                else:
                    ready = np.zeros((hi - lo, cols))
                    has = counts > 0
                    ready[has] = np.maximum.reduceat(val, (ptr[lo:hi] - plo)[has], axis=0)
                np.maximum(ready, 0.0, out=ready)
            else:
                ready = np.zeros((hi - lo, cols))
            if self.has_sync[li]:
                mask = g.sync[lo:hi]
                arrive[lo:hi] = ready
                sub = ready[mask].reshape(-1, S, R)
                ready[mask] = np.broadcast_to(sub.max(axis=2, keepdims=True), sub.shape).reshape(-1, cols)
            elif arrive is not start:
                arrive[lo:hi] = ready
            start[lo:hi] = ready
            fin = ready + dur[lo:hi]
            if self.has_endc[li]:
                elo, ehi = eptr[lo], eptr[hi]
                ecounts = eptr[lo + 1:hi + 1] - eptr[lo:hi]
                local = np.repeat(np.arange(hi - lo), ecounts)
                bound = end[eidx[elo:ehi]] + efrac[elo:ehi, None] * dur[lo + local]
                np.maximum.at(fin, local, bound)
            end[lo:hi] = fin
        return Times(start, end, arrive)
