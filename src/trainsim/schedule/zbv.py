"""ZB-V, the zero-bubble V schedule (Qi et al., ICLR 2024, "Zero Bubble Pipeline Parallelism", Sec. 6; the V-shape
building blocks of Qi et al. 2024, "Pipeline Parallelism with Controllable Memory").

Each of the ``p`` ranks holds two model chunks in a V: chunk 0 of rank ``s`` is virtual stage ``s``, chunk 1 is
virtual stage ``2p − 1 − s``, so rank 0 holds the embedding and the LM head and the turn at rank ``p − 1`` needs no
transfer. The backward is split into input gradient ``B`` and weight gradient ``W``. The order is built the way the
authors' generator builds it (``zbv.py``/``zbv_greedy.py`` in sail-sg/zero-bubble-pipeline-parallelism): a greedy list
schedule on uniform chunk times ``F = B = W`` in which every rank, when free, runs a ready ``B`` first (oldest first),
else a ready forward (the chunk nearer the loss first) while its activations stay within 1F1B's peak (``2p``
chunk activations, i.e. ``p`` micro-batches of the whole stage), else a deferred ``W``; it then keeps the order.

On uniform chunks the bubble of ZB-V is that of ZB-H2, ``(p − 1)(F + B − 2W)`` per chunk (zero when
``F = B = W``), at the activation memory of 1F1B; the fill of the last rank, ``(p − 1)·F``, and the drain of the
first remain in the makespan of one iteration.
"""

from __future__ import annotations

import heapq

from trainsim.schedule.base import BACKWARD, FORWARD, WEIGHT, StageOrder, make_order
from trainsim.schedule.pipeline import P2PMode, PipelineSchedule


def greedy_orders(p: int, m: int, f: float = 1.0, b: float = 1.0, w: float = 1.0, b_rule: str = "earliest",
                  f_first: int = 1) -> tuple[tuple[StageOrder, ...], float]:
    """One greedy ZB-V construction and its makespan (chunk times ``f``, ``b`` input gradient, ``w`` weight
    gradient; activations capped at ``2p`` chunks per rank). ``b_rule``: which ready input gradient first
    (``earliest`` ready, or chunk ``1`` first); ``f_first``: which chunk's ready forward first."""
    last = 2 * p - 1
    dur = {FORWARD: f, BACKWARD: b, WEIGHT: w}

    def vstage(s: int, c: int) -> int:
        return s if c == 0 else last - s

    done: dict[tuple[int, int, int], float] = {}  # (kind, virtual stage, micro-batch) -> end time
    nf = [[0, 0] for _ in range(p)]
    nb = [[0, 0] for _ in range(p)]
    pending: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    mem = [0] * p
    cap = 2 * p
    out: list[tuple[list[int], list[int], list[int]]] = [([], [], []) for _ in range(p)]
    total = 6 * m * p
    placed = 0
    events: list[tuple[float, int, int]] = [(0.0, s, s) for s in range(p)]  # (time, sequence, rank)
    seq = p
    idle: set[int] = set()
    free_at = [0.0] * p
    running: list[float] = []  # end times of placed actions (a heap)

    def dep_time(kind: int, s: int, c: int, i: int) -> float | None:
        vs = vstage(s, c)
        if kind == FORWARD:
            key = (FORWARD, vs - 1, i) if vs > 0 else None
        else:
            key = (BACKWARD, vs + 1, i) if vs < last else (FORWARD, vs, i)
        if key is None:
            return 0.0
        return done.get(key)

    while placed < total:
        if not events:
            raise RuntimeError("ZB-V construction deadlocks")
        t, _, s = heapq.heappop(events)
        if t < free_at[s]:
            continue  # stale wake-up of a busy rank
        choice: tuple[int, int, int] | None = None
        # 1. the ready input-gradient that became ready first
        best = None
        for c in (0, 1):
            i = nb[s][c]
            if i < m and nf[s][c] > i:
                r = dep_time(BACKWARD, s, c, i)
                if r is not None and r <= t and (best is None or (r < best[0] if b_rule == "earliest" else c == 1)):
                    best = (r, c, i)
        if best is not None:
            choice = (BACKWARD, best[1], best[2])
        # 2. a ready forward within the memory cap, the chunk nearer the loss first
        if choice is None and mem[s] < cap:
            for c in (f_first, 1 - f_first):
                i = nf[s][c]
                if i < m and (c == 0 or nf[s][0] > i):
                    r = dep_time(FORWARD, s, c, i)
                    if r is not None and r <= t:
                        choice = (FORWARD, c, i)
                        break
        # 3. a deferred weight gradient
        if choice is None and pending[s]:
            c, i = pending[s].pop(0)
            choice = (WEIGHT, c, i)
        if choice is None:  # idle until another rank finishes something
            while running and running[0] <= t:
                heapq.heappop(running)
            if running:
                seq += 1
                heapq.heappush(events, (running[0], seq, s))
            idle.add(s)
            continue
        k, c, i = choice
        end = t + dur[k]
        free_at[s] = end
        heapq.heappush(running, end)
        done[(k, vstage(s, c), i)] = end
        if k == FORWARD:
            nf[s][c] += 1
            mem[s] += 1
        elif k == BACKWARD:
            nb[s][c] += 1
            pending[s].append((c, i))
        else:
            mem[s] -= 1
        kinds, mbs, chunks = out[s]
        kinds.append(k)
        mbs.append(i)
        chunks.append(c)
        placed += 1
        for r in (s, *idle):
            seq += 1
            heapq.heappush(events, (end, seq, r))
        idle.discard(s)
    makespan = max(free_at)
    return tuple(make_order(k, b_, c) for k, b_, c in out), makespan


def zbv_orders(p: int, m: int, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> tuple[StageOrder, ...]:
    """ZB-V orders of every rank: the shortest of the greedy variants (as the authors' generator tries several
    filling policies and keeps the best)."""
    best: tuple[tuple[StageOrder, ...], float] | None = None
    for b_rule in ("earliest", "chunk1"):
        for f_first in (1, 0):
            try:
                cand = greedy_orders(p, m, f, b, w, b_rule, f_first)
            except RuntimeError:
                continue
            if best is None or cand[1] < best[1] - 1e-12:
                best = cand
    if best is None:
        raise RuntimeError(f"no ZB-V order found for p = {p}, m = {m}")
    return best[0]


class ZBV(PipelineSchedule):
    """ZB-V: zero-bubble V schedule at 1F1B's activation memory."""

    name = "zb-v"
    summary = "zero-bubble V schedule ZB-V (Qi et al. 2024): 2 chunks per rank in a V (--vpp 2), 1F1B memory"
    split_backward = True
    v_shape = True
    fixed_chunks = 2
    searched = True
    cost_aware = True

    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        """Orders built for the chunk times ``costs = (f, b, w)`` (uniform ``F = B = W`` without)."""
        return zbv_orders(p, m, *(costs or (1.0, 1.0, 1.0)))

    def p2p_mode(self, overlap_p2p_comm: bool) -> P2PMode:
        """Sends and receives are posted asynchronously."""
        return "overlap"

    def in_flight(self, stage: int, p: int, m: int, v: int) -> float:
        """The generator caps activations at 1F1B's peak: ``min(p, m)`` micro-batches of the whole stage."""
        return float(min(p, m))

    def pipeline_time(self, f: list[float], b: list[float], w: list[float], P: float, m: int,
                      v: int) -> tuple[float, int]:
        """Busiest rank's work plus fill ``(p − 1)·F`` and the ZB-H2 drain ``(p − 1)·max(0, B − 2W)`` (``B`` the
        input gradient), transfers on the fill and drain paths adding ``P`` each."""
        p = len(f)
        work = [m * v * (fi + bi) for fi, bi in zip(f, b, strict=True)]
        crit = max(range(p), key=lambda i: work[i])
        wbar = sum(w) / p
        bin_ = max(b) - wbar
        bubble = (p - 1) * (max(f) + max(0.0, bin_ - 2 * wbar)) if p > 1 else 0.0
        return work[crit] + bubble + self.transfers_on_path(p, m, v) * P, crit

    def transfers_on_path(self, p: int, m: int, v: int) -> int:
        return 4 * (p - 1) if p > 1 else 0

    def bubble_fraction(self, p: int, m: int, v: int = 2, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> float:
        """Fill ``(p − 1)·f`` plus ZB-H2's drain term ``(p − 1)·max(0, b − 2w)`` against ``2m(f + b + w)`` of work.

        Qi et al. (2024, Table 1) quote ZB-H2's ``(p − 1)(F + B − 2W)``, zero for ``F = B = W``: counted from each
        rank's first action (the parallelogram of consecutive iterations). Within one iteration the last rank
        cannot start before the fill, so the makespan keeps ``(p − 1)·F``: on uniform chunks ZB-V is otherwise
        bubble-free."""
        bubble = (p - 1) * (f + max(0.0, b - 2 * w))
        work = 2 * m * (f + b + w)
        return bubble / (work + bubble)

