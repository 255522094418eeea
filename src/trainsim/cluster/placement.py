"""Node-level placement of a GPU count on a pool: whole free nodes first (inside as few racks as possible), then the
best-fitting partial node; a job is split over partial nodes only when nothing better is free.

Tie-breaks: among equally good nodes the lowest node index wins (deterministic).
"""

from __future__ import annotations

import math

import numpy as np


def place(free: np.ndarray, n: int, gpn: int, nodes_per_rack: int) -> dict[int, int] | None:
    """Choose GPUs for ``n`` on nodes with ``free`` GPUs each; ``None`` when fewer than ``n`` are free.

    Returns ``{node index: gpus}`` in ascending node order.
    """
    if n <= 0 or int(free.sum()) < n:
        return None
    out: dict[int, int] = {}
    remaining = n
    whole = n // gpn
    if whole:
        full = np.flatnonzero(free == gpn)
        if full.size >= whole:
            racks = full // nodes_per_rack
            counts = np.bincount(racks)
            # racks with the most whole free nodes first, then rack index, then node index
            order = np.lexsort((full, racks, -counts[racks]))
            chosen = np.sort(full[order[:whole]])
            out = dict.fromkeys(chosen.tolist(), gpn)
            remaining -= whole * gpn
    if remaining:
        avail = free.copy()
        for k in out:
            avail[k] = 0
        fit = np.flatnonzero(avail >= remaining)
        if fit.size:
            k = int(fit[np.argmin(avail[fit])])  # best fit; argmin returns the lowest index on ties
            out[k] = out.get(k, 0) + remaining
            remaining = 0
        else:
            order = np.lexsort((np.arange(avail.size), -avail))
            for k in order:
                if remaining == 0 or avail[k] == 0:
                    break
                take = int(min(avail[k], remaining))
                out[int(k)] = out.get(int(k), 0) + take
                remaining -= take
    if remaining:
        return None
    return dict(sorted(out.items()))


def shape_gpus_per_node(placement: dict[int, int]) -> int:
    """GPUs per node of the shape that prices a placement: the gcd of its per-node counts."""
    return math.gcd(*placement.values())


def format_nodes(placement: dict[int, int]) -> str:
    """``n3:8;n4:4``."""
    return ";".join(f"n{k}:{v}" for k, v in placement.items())
