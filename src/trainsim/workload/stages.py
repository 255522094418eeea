"""Which transformer layers each pipeline stage and model chunk holds, and how each is recomputed.

Shared by the analytic costs, the memory model and the execution graph so that all three agree.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from trainsim.workload.memo import per_job

if TYPE_CHECKING:
    from trainsim.spec.job import Job


def chunk_layer_indices(job: Job, stage: int, chunk: int) -> range:
    """Global indices of the transformer layers of model chunk ``chunk`` on ``stage``.

    Megatron's interleaved layout: virtual stage ``chunk·p + stage`` holds the next block of consecutive layers
    after virtual stage ``chunk·p + stage − 1`` (block sizes from :attr:`Job.virtual_stage_layers`, uneven with
    first/last stage sizes, embedding/loss accounting or an explicit layout). V-shaped schedules place chunk 1 of
    ``stage`` at virtual stage ``2p − 1 − stage`` (they need an even split).
    """
    return _indices(job.virtual_stage_layers, job.parallelism.pp, job.parallelism.vpp, stage, chunk,
                    job.pipeline.v_shape)


def _indices(vstage_layers: tuple[int, ...], pp: int, vpp: int, stage: int, chunk: int,
             v_shape: bool = False) -> range:
    vs = chunk * pp + (pp - 1 - stage if v_shape and chunk % 2 else stage)
    first = sum(vstage_layers[:vs])
    return range(first, first + vstage_layers[vs])


def chunk_layers(job: Job, stage: int, chunk: int) -> tuple[tuple[bool, str], ...]:
    """(is MoE, recompute mode) of every layer of a model chunk, in forward order.

    With ``--recompute-granularity full --recompute-num-layers N`` the first ``N`` layers of each chunk are
    recomputed (Megatron's ``block`` method) and the others are not (mode ``none``).
    """
    par, model, tr = job.parallelism, job.model, job.training
    return _chunk_kinds(job.virtual_stage_layers, par.pp, par.vpp, stage, chunk, model.moe_layer_flags,
                        tr.recompute_granularity, tr.recompute_num_layers, job.pipeline.v_shape)


def stage_layer_counts(job: Job, stage: int) -> dict[tuple[bool, str], int]:
    """How many layers of each (is MoE, recompute mode) kind ``stage`` holds over all its chunks.

    Called for every stage by the cost, memory and FLOP models (and for every search candidate), so the layer kinds
    are cached on the few values they depend on.
    """
    return dict(_all_stage_counts(job)[stage])


@per_job
def _all_stage_counts(job: Job) -> tuple[tuple[tuple[tuple[bool, str], int], ...], ...]:
    par, model, tr = job.parallelism, job.model, job.training
    return tuple(_stage_counts(job.virtual_stage_layers, par.pp, par.vpp, stage, model.moe_layer_flags,
                               tr.recompute_granularity, tr.recompute_num_layers, job.pipeline.v_shape)
                 for stage in range(par.pp))


@lru_cache(maxsize=8192)
def _stage_counts(vstage_layers: tuple[int, ...], pp: int, vpp: int, stage: int, moe_flags: tuple[bool, ...],
                  recompute: str, recompute_num_layers: int | None,
                  v_shape: bool = False) -> tuple[tuple[tuple[bool, str], int], ...]:
    counts: dict[tuple[bool, str], int] = {}
    for chunk in range(vpp):
        for kind in _chunk_kinds(vstage_layers, pp, vpp, stage, chunk, moe_flags, recompute,
                                 recompute_num_layers, v_shape):
            counts[kind] = counts.get(kind, 0) + 1
    return tuple(counts.items())


@lru_cache(maxsize=8192)
def _chunk_kinds(vstage_layers: tuple[int, ...], pp: int, vpp: int, stage: int, chunk: int,
                 moe_flags: tuple[bool, ...], recompute: str,
                 recompute_num_layers: int | None,
                 v_shape: bool = False) -> tuple[tuple[bool, str], ...]:
    out = []
    for local, layer in enumerate(_indices(vstage_layers, pp, vpp, stage, chunk, v_shape)):
        mode = recompute
        if recompute == "full" and recompute_num_layers is not None and local >= recompute_num_layers:
            mode = "none"
        out.append((moe_flags[layer], mode))
    return tuple(out)
