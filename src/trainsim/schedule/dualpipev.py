"""DualPipe-V: DeepSeek-V3's DualPipe in its V-shaped, single-copy form (``DualPipeV`` in deepseek-ai/DualPipe).

Each of the ``p`` ranks holds two model chunks in a V: chunk 0 of rank ``s`` is virtual stage ``s``, chunk 1 is
virtual stage ``2p − 1 − s`` (rank 0 holds the embedding and the LM head). The order of rank ``s`` follows the
reference implementation's eight steps (``m ≥ 2p`` micro-batches):

1. ``2(p − s − 1)`` forwards of chunk 0;  2. ``s + 1`` pairs F0, F1;
3. ``p − s − 1`` triples B1, W1, F1 (input and weight gradient split, weight gradient done at once);
4. ``m − 2p + s + 1`` overlapped pairs (F0 & B1) and (F1 & B0) — the main step;
5. ``p − s − 1`` pairs B1, (F1 & B0);  6. ``s + 1`` pairs B1, B0, the second half with deferred weight gradients;
7. ``p − s − 1`` pairs W, B0 (deferred);  8. ``s + 1`` deferred weight gradients.

An overlapped pair ``F & B`` is two chunks whose computation and communication interleave; here it is the forward
followed by the backward on the same compute stream (``F&B = F + B``: hiding one chunk's expert all-to-all behind
the other chunk's compute is not modelled). A full (non-deferred) backward is ``B`` immediately followed by its ``W``.

Bubble (DualPipe README, DeepSeek-V3 report Table 2, with ``PP = 2p`` DualPipe stages): ``(p − 1)(F&B + B − 3W)``
with ``F``, ``B`` (full backward) and ``W`` per chunk; activation memory ``PP + 1`` chunk micro-batches per rank at
most, with one parameter copy (the V form halves DualPipe's two copies).
"""

from __future__ import annotations

from collections import deque

from trainsim.errors import TrainsimError
from trainsim.schedule.base import BACKWARD, FORWARD, WEIGHT, StageOrder, make_order
from trainsim.schedule.pipeline import P2PMode, PipelineSchedule


def dualpipev_stage(p: int, s: int, m: int) -> StageOrder:
    """DualPipe-V order of rank ``s``."""
    kind: list[int] = []
    mb: list[int] = []
    chunk: list[int] = []
    nxt = {(FORWARD, 0): 0, (FORWARD, 1): 0, (BACKWARD, 0): 0, (BACKWARD, 1): 0}
    deferred: deque[tuple[int, int]] = deque()

    def put(k: int, c: int, i: int) -> None:
        kind.append(k)
        mb.append(i)
        chunk.append(c)

    def F(c: int) -> None:
        put(FORWARD, c, nxt[(FORWARD, c)])
        nxt[(FORWARD, c)] += 1

    def B(c: int, defer: bool = False) -> None:
        i = nxt[(BACKWARD, c)]
        nxt[(BACKWARD, c)] += 1
        put(BACKWARD, c, i)
        if defer:
            deferred.append((c, i))
        else:
            put(WEIGHT, c, i)

    def W() -> None:
        c, i = deferred.popleft()
        put(WEIGHT, c, i)

    for _ in range(2 * (p - s - 1)):  # 1: nF0
        F(0)
    for _ in range(s + 1):  # 2: nF0F1
        F(0)
        F(1)
    for _ in range(p - s - 1):  # 3: nB1W1F1 (zero bubble: W right after its B)
        B(1)
        F(1)
    for _ in range(m - 2 * p + s + 1):  # 4: nF0B1F1B0 (overlapped pairs)
        F(0)
        B(1)
        F(1)
        B(0)
    for _ in range(p - s - 1):  # 5: nB1F1B0
        B(1)
        F(1)
        B(0)
    step6 = s + 1  # 6: nB1B0, the second half with deferred weight gradients
    defer = False
    for i in range(step6):
        if i == step6 // 2 and s % 2 == 1:
            defer = True
        B(1, defer)
        if i == step6 // 2 and s % 2 == 0:
            defer = True
        B(0, defer)
    for _ in range(p - s - 1):  # 7: nWB0
        W()
        B(0, True)
    while deferred:  # 8: nW
        W()
    return make_order(kind, mb, chunk)


class DualPipeV(PipelineSchedule):
    """DualPipe-V (V placement, overlapped forward/backward chunk pairs, split backward in the cool-down)."""

    name = "dualpipev"
    summary = ("DualPipe-V (DeepSeek-V3's DualPipe, V-shaped single copy): 2 chunks per rank (--vpp 2), "
               "needs m ≥ 2·pp")
    split_backward = True
    v_shape = True
    fixed_chunks = 2
    searched = True

    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        return tuple(dualpipev_stage(p, s, m) for s in range(p))

    def p2p_mode(self, overlap_p2p_comm: bool) -> P2PMode:
        """Sends and receives are posted asynchronously (the reference implementation's ``isend``/``irecv``)."""
        return "overlap"

    def pipeline_time(self, f: list[float], b: list[float], w: list[float], P: float, m: int,
                      v: int) -> tuple[float, int]:
        """Busiest rank's work plus the published bubble ``(p − 1)(F&B + B − 3W)`` per chunk (``F&B = F + B``),
        each transfer between ranks on the fill and drain paths adding ``P``."""
        p = len(f)
        work = [m * v * (fi + bi) for fi, bi in zip(f, b, strict=True)]
        crit = max(range(p), key=lambda i: work[i])
        fb = max(f) + max(b)
        bubble = (p - 1) * max(0.0, fb + max(b) - 3 * (sum(w) / p))
        return work[crit] + bubble + self.transfers_on_path(p, m, v) * P, crit

    def transfers_on_path(self, p: int, m: int, v: int) -> int:
        return 4 * (p - 1) if p > 1 else 0

    def bubble_fraction(self, p: int, m: int, v: int = 2, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> float:
        """``(p − 1)(F&B + B − 3W)`` with ``F&B = f + b + w`` and ``B = b + w`` per chunk, against
        ``2m(f + b + w)`` of work per rank."""
        bubble = max(0.0, (p - 1) * ((f + b + w) + (b + w) - 3 * w))
        work = 2 * m * (f + b + w)
        return bubble / (work + bubble)

    def accepts_microbatches(self, p: int, m: int) -> bool:
        return m >= 2 * p

    def check(self, p: int, m: int, v: int) -> None:
        super().check(p, m, v)
        if not self.accepts_microbatches(p, m):
            raise TrainsimError("training.global_batch_size",
                                f"DualPipe-V needs at least 2·pp = {2 * p} micro-batches per pipeline (got {m})",
                                "raise gbs/(mbs·dp) or lower pp")
