"""Which transformer layers each pipeline stage and model chunk holds, and how each is recomputed.

Shared by the analytic costs, the memory model and the execution graph so that all three agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainsim.spec.job import Job


def chunk_layer_indices(job: Job, stage: int, chunk: int) -> range:
    """Global indices of the transformer layers of model chunk ``chunk`` on ``stage``.

    Megatron's interleaved layout: virtual stage ``chunk·p + stage`` holds the ``chunk·p + stage``-th block of
    ``layers / (p·v)`` consecutive layers.
    """
    p, v = job.parallelism.pp, job.parallelism.vpp
    if v == 1:
        first = sum(job.layers_per_stage[:stage])
        return range(first, first + job.layers_per_stage[stage])
    n = job.layers_per_stage[stage] // v
    vs = chunk * p + stage
    return range(vs * n, (vs + 1) * n)


def chunk_layers(job: Job, stage: int, chunk: int) -> tuple[tuple[bool, str], ...]:
    """(is MoE, recompute mode) of every layer of a model chunk, in forward order.

    With ``--recompute-granularity full --recompute-num-layers N`` the first ``N`` layers of each chunk are
    recomputed (Megatron's ``block`` method) and the others are not (mode ``none``).
    """
    model, tr = job.model, job.training
    rc = tr.recompute_granularity
    out = []
    for local, layer in enumerate(chunk_layer_indices(job, stage, chunk)):
        moe = bool(model.is_moe and layer % model.moe_layer_freq == 0)
        mode = rc
        if rc == "full" and tr.recompute_num_layers is not None and local >= tr.recompute_num_layers:
            mode = "none"
        out.append((moe, mode))
    return tuple(out)


def stage_layer_counts(job: Job, stage: int) -> dict[tuple[bool, str], int]:
    """How many layers of each (is MoE, recompute mode) kind ``stage`` holds over all its chunks."""
    counts: dict[tuple[bool, str], int] = {}
    for chunk in range(job.parallelism.vpp):
        for kind in chunk_layers(job, stage, chunk):
            counts[kind] = counts.get(kind, 0) + 1
    return counts
