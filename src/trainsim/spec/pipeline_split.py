"""How the transformer layers are split over pipeline ranks and their virtual stages (model chunks).

Megatron-Core's rules (``get_num_layers_to_build`` and ``PipelineParallelLayerLayout`` in
``megatron/core/transformer``), in order of precedence:

1. ``--pipeline-model-parallel-layout`` (``pipeline_layout``): one segment per virtual stage, separated by ``|``, in
   virtual-stage order (virtual stage ``c·pp + r`` is chunk ``c`` of rank ``r``). ``E`` is the embedding, ``t`` a
   transformer layer, ``L`` the loss/output layer; ``X*N`` and ``(…)*N`` repeat; spaces and commas are ignored.
   Example: NeMo-style ``Et|(tt|)*30tL`` for 62 layers over 32 virtual stages.
2. ``--decoder-first-pipeline-num-layers``/``--decoder-last-pipeline-num-layers``: the first/last rank holds that
   many layers, the other ranks share the rest evenly; with virtual stages every rank's layers are split evenly over
   its chunks (so each count must be divisible by ``vpp``).
3. Even split, optionally counting the embedding (``--account-for-embedding-in-pipeline-split``) and the loss
   (``--account-for-loss-in-pipeline-split``) as one layer each: ``(layers + extras) / (pp·vpp)`` per virtual stage,
   and the first (last) virtual stage builds one transformer layer less.

The result is the layer count of every virtual stage; the cost, memory and graph models read it through
:mod:`trainsim.workload.stages`, so all of them agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError

if TYPE_CHECKING:
    from trainsim.spec.parallelism import Parallelism

_FIELD = "parallelism.pipeline_layout"


def layout_layers(par: Parallelism, num_layers: int) -> tuple[int, ...]:
    """Transformer layers of every virtual stage from ``par.pipeline_layout`` (parsed by
    :func:`trainsim.spec.parallelism.parse_pipeline_layout`), checked against pp·vpp and the model."""
    counts = par.virtual_stage_layers
    assert counts is not None
    pp, vpp = par.pp, par.vpp
    if len(counts) != pp * vpp:
        raise TrainsimError(_FIELD, f"has {len(counts)} virtual stages but pp·vpp = {pp}·{vpp} = {pp * vpp}",
                            "give one '|'-separated entry per virtual stage")
    if sum(counts) != num_layers:
        raise TrainsimError(_FIELD, f"places {sum(counts)} transformer layers (t) but the model has {num_layers}",
                            "put every layer in exactly one virtual stage")
    return counts


def virtual_stage_layers(num_layers: int, par: Parallelism) -> tuple[int, ...]:
    """Transformer layers of every virtual stage, indexed ``chunk·pp + rank``; raises on an impossible split."""
    pp, vpp = par.pp, par.vpp
    first, last = par.first_stage_layers, par.last_stage_layers
    acc_emb, acc_loss = par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split
    if par.pipeline_layout is not None:
        if first is not None or last is not None or acc_emb or acc_loss:
            raise TrainsimError(_FIELD, "a pipeline layout already fixes every stage",
                                "drop --decoder-first/last-pipeline-num-layers and --account-for-* with a layout")
        return layout_layers(par, num_layers)
    if first is not None or last is not None:
        if acc_emb or acc_loss:
            raise TrainsimError("parallelism.first_stage_layers",
                                "uneven first/last stages cannot be combined with --account-for-*-in-pipeline-split",
                                "use one of the two (Megatron-Core refuses both)")
        return tuple(_uneven(num_layers, pp, vpp, first, last))
    extras = int(acc_emb) + int(acc_loss)
    total = num_layers + extras
    if total % (pp * vpp):
        what = f"{num_layers} layers" + (f" + {extras} (embedding/loss)" if extras else "")
        raise TrainsimError(
            "model.num_layers", f"{what} are not divisible by pp·vpp = {pp}·{vpp} = {pp * vpp}",
            "change pp/vpp, give --decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-"
            "pipeline-split or --pipeline-model-parallel-layout",
        )
    each = total // (pp * vpp)
    counts = [each] * (pp * vpp)
    if acc_emb:
        counts[0] -= 1
    if acc_loss:
        counts[-1] -= 1
    if min(counts) < 0:
        raise TrainsimError("model.num_layers", "a virtual stage would hold a negative number of layers",
                            "use fewer pipeline stages")
    return tuple(counts)


def _uneven(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None) -> list[int]:
    field = "parallelism.first_stage_layers"
    if pp == 1:
        raise TrainsimError(field, "uneven first/last stages need pipeline parallelism", "use pp > 1")
    given = {i: v for i, v in ((0, first), (pp - 1, last)) if v is not None}
    rest = num_layers - sum(given.values())
    middle = pp - len(given)
    if rest < 0 or (middle == 0 and rest != 0) or (middle and (rest % middle or rest == 0)):
        raise TrainsimError(field, f"cannot split {num_layers} layers over {pp} stages with first/last = "
                            f"{first}/{last}", "the remaining layers must divide evenly over the other stages")
    ranks = [given.get(i, rest // middle if middle else 0) for i in range(pp)]
    bad = [r for r in ranks if r % vpp]
    if bad:
        raise TrainsimError(field, f"with {vpp} virtual stages per rank every rank's layers must divide by {vpp} "
                            f"(ranks hold {sorted(set(ranks))})",
                            "choose first/last stage sizes divisible by vpp, or give --pipeline-model-parallel-layout")
    return [ranks[vs % pp] // vpp for vs in range(pp * vpp)]
