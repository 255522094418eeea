"""GPipe (Huang et al., 2019): every stage runs all forwards, then all backwards.

The backward pass of the concatenated micro-batches runs in reverse micro-batch order (autograd order, as in GPipe's
Figure 2 and torchgpipe), so the last stage starts the backward of the last micro-batch right after its forward.
Activations of all ``m`` micro-batches are alive at once; the bubble fraction on uniform stages is
``(p − 1)/(m + p − 1)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.schedule.base import BACKWARD, FORWARD, StageOrder, check_sizes, make_order
from trainsim.schedule.pipeline import PipelineSchedule

if TYPE_CHECKING:
    import numpy as np
else:
    from trainsim._lazy_numpy import np


def gpipe(p: int, m: int, v: int = 1) -> tuple[StageOrder, ...]:
    """GPipe order of every stage."""
    check_sizes("gpipe", p, m, v)
    kind = np.concatenate([np.full(m, FORWARD), np.full(m, BACKWARD)])
    mb = np.concatenate([np.arange(m), np.arange(m)[::-1]])
    order = make_order(kind, mb)
    return tuple(order for _ in range(p))


class GPipe(PipelineSchedule):
    """GPipe: all forwards, then all backwards; every micro-batch in flight."""

    name = "gpipe"
    summary = "all forwards then all backwards (Huang et al. 2019); every micro-batch's activations in flight"

    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        return gpipe(p, m, v)

    def in_flight(self, stage: int, p: int, m: int, v: int) -> float:
        return float(m)

    def logits_held(self, m: int) -> int:
        return m

    def pipeline_time(self, f: list[float], b: list[float], w: list[float], P: float, m: int,
                      v: int) -> tuple[float, int]:
        """``(m − 1)·max(F + P) + ΣF + (m − 1)·max(B + P) + ΣB + 2(p − 1)P``."""
        p = len(f)
        t = ((m - 1) * max(fi + P for fi in f) + sum(f) + (m - 1) * max(bi + P for bi in b) + sum(b)
             + 2 * (p - 1) * P)
        return t, max(range(p), key=lambda i: f[i] + b[i])

    def transfers_on_path(self, p: int, m: int, v: int) -> int:
        return 2 * (m - 1) + 2 * (p - 1) if p > 1 else 0

    def bubble_fraction(self, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
        """``(p − 1)/(m + p − 1)``."""
        return (p - 1) / (m + p - 1)
