"""Interleaved 1F1B with virtual stages (Narayanan et al., SC'21; Megatron-Core's
``forward_backward_pipelining_with_interleaving``).

Each rank holds ``v`` model chunks. Forwards follow Megatron-Core's schedule table: micro-batches in groups of
``p`` (``microbatch_group_size_per_vp_stage``, default ``p``), each group through chunk 0, then chunk 1, …; backwards
follow the same table with the chunks reversed. Rank ``s`` runs ``min((p − s − 1)·2 + (v − 1)·p, m·v)`` warm-up
forwards, then one forward and one backward at a time, then drains. The bubble fraction on uniform stages is
``(p − 1)/(v·m + p − 1)``. Megatron-Core requires ``m`` to be a multiple of ``p`` (a last group smaller than ``p``
stalls the pipeline), and so does this function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError
from trainsim.schedule.base import BACKWARD, FORWARD, StageOrder, check_sizes, make_order
from trainsim.schedule.pipeline import P2PMode, PipelineSchedule

if TYPE_CHECKING:
    import numpy as np
else:
    from trainsim._lazy_numpy import np


def schedule_table(m: int, v: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Megatron-Core's ``get_schedule_table``: (micro-batch, chunk) of each virtual micro-batch, forward order."""
    mbs: list[np.ndarray] = []
    chunks: list[np.ndarray] = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        ids = np.arange(lo, hi)
        mbs.append(np.tile(ids, v))
        chunks.append(np.repeat(np.arange(v), hi - lo))
    return np.concatenate(mbs), np.concatenate(chunks)


def warmup_forwards(p: int, s: int, m: int, v: int) -> int:
    """Warm-up forwards (virtual micro-batches) of rank ``s`` (Megatron-Core's ``get_pp_rank_microbatches``)."""
    return min((p - s - 1) * 2 + (v - 1) * p, m * v)


def interleaved_stage(p: int, s: int, m: int, v: int) -> StageOrder:
    """Interleaved 1F1B order of rank ``s``."""
    total = m * v
    f_mb, f_chunk = schedule_table(m, v, p)
    b_mb, b_chunk = f_mb, v - 1 - f_chunk
    w = warmup_forwards(p, s, m, v)
    steady = total - w
    kind = np.empty(2 * total, dtype=np.int8)
    mb = np.empty(2 * total, dtype=np.int32)
    ch = np.empty(2 * total, dtype=np.int16)
    kind[:w], mb[:w], ch[:w] = FORWARD, f_mb[:w], f_chunk[:w]
    sl_f = slice(w, w + 2 * steady, 2)
    sl_b = slice(w + 1, w + 2 * steady, 2)
    kind[sl_f], mb[sl_f], ch[sl_f] = FORWARD, f_mb[w:], f_chunk[w:]
    kind[sl_b], mb[sl_b], ch[sl_b] = BACKWARD, b_mb[:steady], b_chunk[:steady]
    tail = slice(w + 2 * steady, None)
    kind[tail], mb[tail], ch[tail] = BACKWARD, b_mb[steady:], b_chunk[steady:]
    return make_order(kind, mb, ch)


def interleaved(p: int, m: int, v: int = 1) -> tuple[StageOrder, ...]:
    """Interleaved 1F1B order of every rank."""
    check_sizes("interleaved", p, m, v, interleaved=True)
    if m % p:
        raise TrainsimError(
            "training.global_batch_size",
            f"the interleaved schedule needs the micro-batches per pipeline ({m}) to be a multiple of pp = {p} "
            "(Megatron-Core refuses a last micro-batch group smaller than pp)",
            f"choose the global batch so that gbs/(mbs·dp) is a multiple of {p}",
        )
    return tuple(interleaved_stage(p, s, m, v) for s in range(p))


class Interleaved(PipelineSchedule):
    """Interleaved 1F1B with ``vpp`` virtual stages per rank (Megatron-Core)."""

    name = "interleaved"
    summary = "interleaved 1F1B with --vpp model chunks per rank (Narayanan et al. 2021); needs m % pp == 0"
    interleaves = True

    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        return interleaved(p, m, v)

    def p2p_mode(self, overlap_p2p_comm: bool) -> P2PMode:
        """Non-blocking sends/receives with ``overlap_p2p_comm`` (Megatron-Core's default), else one batched call
        per step."""
        return "overlap" if overlap_p2p_comm else "blocking-steps"

    def in_flight(self, stage: int, p: int, m: int, v: int) -> float:
        return min(warmup_forwards(p, stage, m, v) + 1, m * v) / v

    def bubble_fraction(self, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
        """``(p − 1)/(v·m + p − 1)``."""
        return (p - 1) / (v * m + p - 1)

    def accepts_microbatches(self, p: int, m: int) -> bool:
        return m % p == 0

    def check(self, p: int, m: int, v: int) -> None:
        if v == 1:
            raise TrainsimError("parallelism.schedule", "the interleaved schedule needs vpp > 1",
                                "give --vpp (virtual stages per rank)")
        if not self.accepts_microbatches(p, m):
            raise TrainsimError(
                "training.global_batch_size",
                f"the interleaved schedule needs micro-batches per pipeline ({m}) divisible by pp = {p} "
                "(Megatron-Core refuses a last micro-batch group smaller than pp)",
                "make gbs/(mbs·dp) a multiple of pp, or use the non-interleaved 1f1b schedule",
            )
