"""ZB-H1, the first handcrafted zero-bubble schedule (Qi et al., ICLR 2024, "Zero Bubble Pipeline Parallelism").

The backward pass is split into ``B`` (input gradient, on the critical path) and ``W`` (weight gradient, movable).
Stage ``s`` runs ``p − s − 1`` warm-up forwards, then ``s`` forward/backward pairs whose weight gradients are deferred,
then forward/backward/weight triples, then backward/weight pairs, and finally the deferred weight gradients, which fill
the drain bubble. Weight gradients run in the order of their backwards. This is the order of the authors' reference
implementation (``ZeroBubbleH1Pipeline`` with exact semantics). In-flight activations are those of 1F1B; on uniform
stages the bubble is ``(p − 1)(F + B − W)`` instead of 1F1B's ``(p − 1)(F + B + W)``.
"""

from __future__ import annotations

from trainsim.schedule.base import BACKWARD, FORWARD, WEIGHT, StageOrder, check_sizes, make_order
from trainsim.schedule.pipeline import P2PMode, PipelineSchedule


def zb_h1_stage(p: int, s: int, m: int) -> StageOrder:
    """ZB-H1 order of stage ``s``."""
    kind: list[int] = []
    mb: list[int] = []
    fwd = bwd = 0
    pending: list[int] = []  # backwards whose weight gradient is still to do, oldest first

    def f() -> None:
        nonlocal fwd
        kind.append(FORWARD)
        mb.append(fwd)
        fwd += 1

    def b() -> None:
        nonlocal bwd
        kind.append(BACKWARD)
        mb.append(bwd)
        pending.append(bwd)
        bwd += 1

    def w() -> None:
        kind.append(WEIGHT)
        mb.append(pending.pop(0))

    for _ in range(p - s - 1):  # warm-up
        if fwd < m:
            f()
    for _ in range(s):  # forward/backward, weight gradients deferred
        if fwd < m:
            f()
            b()
    while fwd < m:  # steady state
        f()
        b()
        w()
    while bwd < m:  # drain
        b()
        w()
    while pending:  # deferred weight gradients
        w()
    return make_order(kind, mb)


def zb_h1(p: int, m: int, v: int = 1) -> tuple[StageOrder, ...]:
    """ZB-H1 order of every stage."""
    check_sizes("zb-h1", p, m, v)
    return tuple(zb_h1_stage(p, s, m) for s in range(p))


class ZBH1(PipelineSchedule):
    """ZB-H1: 1F1B's memory, deferred weight gradients fill the drain bubble."""

    name = "zb-h1"
    summary = "zero-bubble ZB-H1 (Qi et al. 2024): split backward, deferred weight gradients, 1F1B memory"
    split_backward = True
    searched = True

    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        return zb_h1(p, m, v)

    def p2p_mode(self, overlap_p2p_comm: bool) -> P2PMode:
        """Sends and receives are posted asynchronously."""
        return "overlap"

    def in_flight(self, stage: int, p: int, m: int, v: int) -> float:
        return float(min(p - stage, m))

    def pipeline_time(self, f: list[float], b: list[float], w: list[float], P: float, m: int,
                      v: int) -> tuple[float, int]:
        """1F1B less ``min(m + p − 2, 2(p − 1))·W`` (exact on uniform stages: ``(m + p − 1)(F + B) +
        max(1, m − p + 1)·W``), never below the busiest stage's own work."""
        t, crit = super().pipeline_time(f, b, w, P, m, v)
        p = len(f)
        if p == 1:
            return t, crit
        wbar = sum(w) / p
        floor = m * max(fi + bi for fi, bi in zip(f, b, strict=True)) + 2 * (m + p - 2) * P
        return max(floor, t - min(m + p - 2, 2 * (p - 1)) * wbar), crit

    def bubble_fraction(self, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
        """Bubble ``(p − 1)(f + b − w)`` against ``m(f + b + w)`` of work (Qi et al. 2024, Table 1)."""
        bubble = (p - 1) * (f + b - w)
        return bubble / (m * (f + b + w) + bubble)
