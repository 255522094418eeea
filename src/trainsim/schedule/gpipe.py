"""GPipe (Huang et al., 2019): every stage runs all forwards, then all backwards.

The backward pass of the concatenated micro-batches runs in reverse micro-batch order (autograd order, as in GPipe's
Figure 2 and torchgpipe), so the last stage starts the backward of the last micro-batch right after its forward.
Activations of all ``m`` micro-batches are alive at once; the bubble fraction on uniform stages is
``(p − 1)/(m + p − 1)``.
"""

from __future__ import annotations

import numpy as np

from trainsim.schedule.base import BACKWARD, FORWARD, StageOrder, check_sizes, make_order


def gpipe(p: int, m: int, v: int = 1) -> tuple[StageOrder, ...]:
    """GPipe order of every stage."""
    check_sizes("gpipe", p, m, v)
    kind = np.concatenate([np.full(m, FORWARD), np.full(m, BACKWARD)])
    mb = np.concatenate([np.arange(m), np.arange(m)[::-1]])
    order = make_order(kind, mb)
    return tuple(order for _ in range(p))
