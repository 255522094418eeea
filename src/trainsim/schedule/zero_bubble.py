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
