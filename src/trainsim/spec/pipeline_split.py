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

Without any of these, the framework profile's split rule (``pipeline_layer_split``) decides:

* ``even`` (Megatron-Core): ``layers / (pp·vpp)`` per virtual stage; refused with a fix hint when it does not divide.
* ``account-for-embedding-and-loss`` (torchtitan's ``generate_llm_fqn_per_model_part`` with its default
  ``pipeline_parallel_first_stage_less_layers = pipeline_parallel_last_stage_less_layers = 1``; Llama 3's
  "one Transformer layer is reduced each from the first and the last stages"): the embedding and the output/loss
  weigh one layer each, ``layers + 2`` slots are spread over the ``pp·vpp`` virtual stages (the first
  ``(layers + 2) mod (pp·vpp)`` get one more), and the first (last) virtual stage builds one transformer layer
  less. For 126 layers on pp 16 × vpp 2 every chunk holds 4 layers, the first chunk of rank 0 and the last of
  rank 15 hold 3 — the same counts as Megatron-Core's ``--account-for-embedding/loss-in-pipeline-split``.
* ``type:transformer`` (DeepSpeed ``PipelineModule(partition_method='type:transformer')``: ``partition_balanced``
  over weights 1 for transformer layers, 0 for the rest): DeepSpeed's algorithm (``deepspeed/runtime/utils.py``): a
  binary search for the smallest bottleneck, then a greedy probe that fills every stage from the first up to it, so
  the stages hold ``ceil(layers / pp)`` each and the last one the rest (BLOOM's 70 layers over 12 stages: eleven of
  6, the last 4 beside the output layer).
* ``parameters`` (DeepSpeed's default): modelled as ``type:transformer`` (the transformer layers dominate the
  parameter count; the embedding's weight on the first stage is not balanced).

Uneven first/last stages with virtual stages: Megatron-Core splits every rank's layers evenly over its chunks and
refuses counts not divisible by ``vpp``. Pipeline engines outside Megatron (``torch-pipelining``, Meta's Llama 3
engine) build the chunks from module lists, so a rank's layers are spread as evenly as possible: the first rank's
short chunk is its first (next to the embedding), the last rank's its last (next to the loss), e.g. 7 layers over
2 chunks are ``[3, 4]`` on the first rank and ``[4, 3]`` on the last.

The result is the layer count of every virtual stage; the cost, memory and graph models read it through
:mod:`trainsim.workload.stages`, so all of them agree.
"""

from __future__ import annotations

import bisect
import itertools
from functools import lru_cache
from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError

if TYPE_CHECKING:
    from trainsim.spec.parallelism import Parallelism

_FIELD = "parallelism.pipeline_layout"
#: Pipeline engines that split a rank's layers over its chunks exactly as Megatron-Core does (divisible by vpp).
MEGATRON_ENGINES = frozenset({"megatron"})


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


def virtual_stage_layers(num_layers: int, par: Parallelism, split: str = "even",
                         engine: str = "megatron") -> tuple[int, ...]:
    """Transformer layers of every virtual stage, indexed ``chunk·pp + rank``; raises on an impossible split.

    ``split`` is the framework profile's ``pipeline_layer_split`` (used when the plan gives no explicit split) and
    ``engine`` its ``pipeline_engine`` (how uneven first/last ranks spread over their chunks): see the module
    docstring."""
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
        return tuple(_uneven(num_layers, pp, vpp, first, last, engine in MEGATRON_ENGINES))
    if not (acc_emb or acc_loss) and pp * vpp > 1:
        if split == "account-for-embedding-and-loss":
            return _weighted(num_layers, pp * vpp)
        if split in ("type:transformer", "parameters") and vpp == 1:
            return _deepspeed_balanced(num_layers, pp)
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


def vpp_from_layers_per_chunk(num_layers: int, pp: int, per_chunk: int) -> int | None:
    """Virtual stages per rank given Megatron's ``--num-layers-per-virtual-pipeline-stage`` (``layers / pp / k``);
    ``None`` when the layers do not divide over the ranks and chunks."""
    if per_chunk < 1 or num_layers % pp or (num_layers // pp) % per_chunk:
        return None
    return num_layers // pp // per_chunk


def split_slots(num_layers: int, split: str) -> int:
    """Slots a layer-split rule spreads over the virtual stages: the layers, plus the embedding and the loss where
    the rule weighs them as one layer each (``account-for-embedding-and-loss``)."""
    return num_layers + (2 if split == "account-for-embedding-and-loss" else 0)


def _weighted(num_layers: int, stages: int) -> tuple[int, ...]:
    """torchtitan's ``generate_llm_fqn_per_model_part(stages, layers, input_weight=1, output_weight=1)``."""
    slots = split_slots(num_layers, "account-for-embedding-and-loss")
    each, extra = divmod(slots, stages)
    if each < 1:
        raise TrainsimError("model.num_layers", f"{num_layers} layers + embedding + loss cannot fill {stages} "
                            "virtual stages", "use fewer pipeline stages or virtual stages")
    counts = [each + (1 if i < extra else 0) for i in range(stages)]
    counts[0] -= 1
    counts[-1] -= 1
    return tuple(counts)


def _probe(prefix: list[int], parts: int, bottleneck: float) -> tuple[list[int], bool]:
    """DeepSpeed's ``_lprobe``: fill the stages from the first, each up to ``bottleneck``; the stage boundaries
    (indices into the items) and whether the last stage stays within it."""
    n, total = len(prefix), prefix[-1]
    bounds = [0] + [n] * parts
    target, chunk = bottleneck, n // parts
    step = chunk
    for p in range(1, parts):
        while step < n and prefix[step] < target:
            step += chunk
        bounds[p] = bisect.bisect_left(prefix, target, lo=step - chunk, hi=min(step, n))
        if bounds[p] == n:
            return bounds, total - prefix[bounds[p - 1]] < bottleneck
        target = prefix[bounds[p] - 1] + bottleneck
    return bounds, target >= total


@lru_cache(maxsize=1024)
def _deepspeed_balanced(num_layers: int, pp: int) -> tuple[int, ...]:
    """Transformer layers per stage under DeepSpeed's ``partition_balanced`` with weight 1 per transformer layer and 0
    for the embedding before and the output layer after them (``deepspeed.runtime.utils``, eps 1e-3)."""
    if num_layers < pp:
        raise TrainsimError("model.num_layers", f"{num_layers} layers cannot fill {pp} pipeline stages",
                            "use fewer pipeline stages")
    weights = [0] + [1] * num_layers + [0]
    prefix = list(itertools.accumulate(weights))
    lower, upper, eps = prefix[-1] / pp, float(prefix[-1]), 1e-3
    while upper > lower + eps:  # _rb_partition_balanced: the smallest bottleneck the probe can meet
        mid = lower + (upper - lower) / 2
        if _probe(prefix, pp, mid)[1]:
            upper = mid
        else:
            lower = mid + eps
    bounds, _ok = _probe(prefix, pp, upper)
    counts = tuple(sum(weights[bounds[i]:bounds[i + 1]]) for i in range(pp))
    if min(counts) < 1:
        raise TrainsimError("model.num_layers", f"DeepSpeed's balanced partition of {num_layers} layers leaves a "
                            f"pipeline stage without a transformer layer ({counts})", "use fewer pipeline stages")
    return counts


def _spread(layers: int, vpp: int, short_first: bool) -> list[int]:
    """``layers`` over ``vpp`` chunks as evenly as possible; the short chunks first (or last)."""
    each, extra = divmod(layers, vpp)
    chunks = [each + (1 if c >= vpp - extra else 0) for c in range(vpp)]
    return chunks if short_first else chunks[::-1]


def _uneven(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None,
            megatron: bool = True) -> list[int]:
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
    if not megatron:
        chunks = [_spread(n, vpp, short_first=r != pp - 1) for r, n in enumerate(ranks)]
        return [chunks[vs % pp][vs // pp] for vs in range(pp * vpp)]
    bad = [r for r in ranks if r % vpp]
    if bad:
        raise TrainsimError(field, f"with {vpp} virtual stages per rank every rank's layers must divide by {vpp} "
                            f"(ranks hold {sorted(set(ranks))})",
                            "choose first/last stage sizes divisible by vpp, give --account-for-embedding/loss-in-"
                            "pipeline-split (one layer less on the first/last virtual stage) or "
                            "--pipeline-model-parallel-layout")
    return [ranks[vs % pp] // vpp for vs in range(pp * vpp)]
