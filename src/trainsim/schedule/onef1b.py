"""1F1B (PipeDream-Flush, Megatron-LM's default pipeline schedule; Narayanan et al., SC'21).

Stage ``s`` of ``p`` runs ``min(p − s − 1, m)`` warm-up forwards, then alternates one forward and one backward
(steady state), then drains the remaining backwards. At most ``p − s`` micro-batches are in flight on stage ``s``; the
bubble fraction on uniform stages is ``(p − 1)/(m + p − 1)``, the same as GPipe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.schedule.base import BACKWARD, FORWARD, StageOrder, check_sizes, make_order
from trainsim.schedule.pipeline import PipelineSchedule

if TYPE_CHECKING:
    import numpy as np
else:
    from trainsim._lazy_numpy import np


def warmup_forwards(p: int, s: int, m: int) -> int:
    """Warm-up forwards of stage ``s`` (Megatron's ``num_warmup_microbatches``)."""
    return min(p - s - 1, m)


def onef1b_stage(p: int, s: int, m: int) -> StageOrder:
    """1F1B order of stage ``s``."""
    w = warmup_forwards(p, s, m)
    steady = m - w
    kind = np.empty(2 * m, dtype=np.int8)
    mb = np.empty(2 * m, dtype=np.int32)
    kind[:w] = FORWARD
    mb[:w] = np.arange(w)
    kind[w:w + 2 * steady:2] = FORWARD
    mb[w:w + 2 * steady:2] = np.arange(w, m)
    kind[w + 1:w + 2 * steady:2] = BACKWARD
    mb[w + 1:w + 2 * steady:2] = np.arange(steady)
    kind[w + 2 * steady:] = BACKWARD
    mb[w + 2 * steady:] = np.arange(steady, m)
    return make_order(kind, mb)


def onef1b(p: int, m: int, v: int = 1) -> tuple[StageOrder, ...]:
    """1F1B order of every stage."""
    check_sizes("1f1b", p, m, v)
    return tuple(onef1b_stage(p, s, m) for s in range(p))


class OneF1B(PipelineSchedule):
    """1F1B (PipeDream-Flush), Megatron-LM's default."""

    name = "1f1b"
    summary = "one forward, one backward (PipeDream-Flush; Megatron-LM's default); p − s micro-batches in flight"
    searched = True

    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        return onef1b(p, m, v)

    def in_flight(self, stage: int, p: int, m: int, v: int) -> float:
        return float(min(p - stage, m))

    def bubble_fraction(self, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
        """``(p − 1)/(m + p − 1)``."""
        return (p - 1) / (m + p - 1)
