"""A measurement row of any source as a :class:`~trainsim.validation.measurements.Measurement`.

Used for every row whose source is not one of the four packaged ones (those keep their
:data:`~trainsim.validation.measurements.SOURCE_DEFAULTS`). The framework, system and model family come from the
documented tables of :mod:`trainsim.validation.row_rules`; an empty cell takes the setting the notes state as a
Megatron argument (:data:`~trainsim.validation.row_rules.NOTES_FLAGS`, e.g. ``--sequence-parallel``,
``--use-distributed-optimizer``, ``--overlap-grad-reduce``), else the framework's default, all listed here and in
docs/VALIDATION.md ("Settings chosen for cells the sources leave empty"):

- ``precision``: bf16 (fp16 for ``megatron-lm-2021``, whose 2021 examples train with ``--fp16``, and on a GPU without
  BF16 tensor cores, Volta);
- ``micro_batch``: 1 for the Megatron stacks (their scripts set ``--micro-batch-size``, mostly 1); for ``fsdp``,
  ``deepspeed``, ``hf-transformers`` and ``torchtitan`` the whole local batch ``global_batch / dp`` in one micro-batch
  (no gradient accumulation unless stated: Hugging Face ``gradient_accumulation_steps`` and DeepSpeed
  ``gradient_accumulation_steps`` default to 1, torchtitan accumulates only when ``global_batch_size`` exceeds
  ``local_batch_size`` × dp), halved until the run fits in memory (llm-foundry's ``device_train_microbatch_size:
  auto`` picks the largest that fits); ``tp``, ``pp``, ``vpp``, ``cp``: 1; ``dp``: from ``num_gpus / (tp·pp·cp)``;
- ``ep`` (optional column): the notes' ``--expert-model-parallel-size N`` or ``EPN``, else 1 (Megatron's default)
  unless a mixture-of-experts run would then not fit: the smallest power-of-two size dividing the experts that
  fits without recomputation, else with it (:mod:`trainsim.validation.fitting`);
- ``sp``: off (Megatron's ``--sequence-parallel`` default), on with tp > 1 for ``nemo`` (NeMo / Megatron-Bridge
  recipes set ``sequence_parallel=True`` with TP) and the stacks whose TP always shards the sequence (the profile's
  ``tp_shards_sequence``: torchtitan's TP plan, Meta's Llama 3);
- ``recompute``: none (no framework recomputes by default), unless the job would then not fit in memory: the run
  ran, so it recomputed — the lightest recomputation that fits (selective first where attention keeps the s² scores
  or the stack's selective checkpointing is op-level, torchtitan's default; then, on stacks running Megatron's
  checkpointing, full recomputation of the fewest layers per model chunk that fits, Megatron's block method; then
  full), reported with the row;
- ``zero``: the profile's ``default_zero_stage`` (Megatron 0, NeMo 1: distributed optimizer, FSDP and torchtitan 3:
  full sharding, DeepSpeed 0); overlap flags, gradient-reduce dtype, attention path: the profile's;
- pipeline send/recv overlapped, except ``megatron-lm-2021`` (blocking, as for the SC'21 rows); notes saying
  ``DDP impl=torch`` overlap the gradient all-reduce with the backward pass (PyTorch DDP buckets).

Layers that do not divide over ``pp·vpp``: an optional ``pipeline_layout`` or ``first_stage_layers`` /
``last_stage_layers`` column wins; else first/last stage layer counts stated in the notes
(``--decoder-first-pipeline-num-layers N`` or "first stage ... N layers"); else a stack that splits any layer count
itself follows its own rule (the profile's ``pipeline_layer_split``: DeepSpeed's balanced partition, torchtitan's and
Meta's split counting the embedding and the output as layers); else (Megatron's even split) when ``L + 2`` divides,
the embedding and the loss count as one layer each (Megatron-Core's ``account_for_embedding_in_pipeline_split`` and
``account_for_loss_in_pipeline_split``: the first and last stage hold one layer fewer, as NeMo's 405B recipe); else a
balanced uneven split (:func:`balanced_first_last`, reported with the row); else the row is not predictable. Model:
a model preset of the same shape (``L``, ``h``, ``heads``, ``kv_heads``) whose family name occurs in the row's model
name gives the architecture (this is how mixture-of-experts models are recognised: the schema has no expert columns,
and an MoE name without such a preset is not predictable); otherwise the family rules of
:data:`~trainsim.validation.row_rules.FAMILIES`. Optional extension columns: ``framework``, ``ep``,
``first_stage_layers``, ``last_stage_layers``, ``pipeline_layout``.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any, cast

import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.spec.framework import Framework, load_framework
from trainsim.spec.job import Job
from trainsim.spec.model import Model, megatron_swiglu_ffn
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.pipeline_split import split_slots, virtual_stage_layers
from trainsim.spec.presets import list_models, load_model, load_system
from trainsim.spec.system import System
from trainsim.spec.training import Precision, Recompute, RecomputeModule, Training
from trainsim.validation.fitting import (
    expert_parallel_that_fits,
    fitting_job,
    offload_settings,
    offload_stage_that_fits,
    sequence_parallel_that_fits,
)
from trainsim.validation.measurements import (
    MEASURED_COLUMNS,
    Measurement,
    RowError,
    measured_iteration_time,
    parse_number,
)
from trainsim.validation.row_rules import (
    FRAMEWORK_NOTES,
    MOE_NAME,
    NO_DROPOUT_GPT_FRAMEWORKS,
    NON_TRANSFORMER_NAME,
    NVL_TRAY_GPUS,
    SYSTEM_FOR_GPU_KEY,
    UNMODELLED_OFFLOAD,
    Family,
    family_of,
    family_of_shape,
    infer_framework,
    notes_flags,
    reports_eq3,
    sdpa_kernel_named,
    source_conventions,
    stated_vpp,
    system_for_gpu,
)
from trainsim.workload.fp8 import Fp8Recipe

#: Defaults for empty cells, per framework on top of :data:`ROW_DEFAULTS` (module docstring gives the sources).
ROW_DEFAULTS: dict[str, Any] = {"precision": "bf16", "sp": False, "recompute": "none", "micro_batch": 1,
                                "overlap_p2p_comm": True}
#: ``micro_batch`` default of the stacks that run the local batch without gradient accumulation unless told.
LOCAL_BATCH = "local batch"
FRAMEWORK_ROW_DEFAULTS: dict[str, dict[str, Any]] = {
    "megatron-lm-2021": {"precision": "fp16", "overlap_p2p_comm": False},
    "nemo": {"sp": True},
    "torchtitan": {"micro_batch": LOCAL_BATCH},  # sequence parallelism: the profile's tp_shards_sequence
    "fsdp": {"micro_batch": LOCAL_BATCH},
    "deepspeed": {"micro_batch": LOCAL_BATCH},
    "hf-transformers": {"micro_batch": LOCAL_BATCH},
}
_TRUE = {"on", "true", "yes", "y", "1", "1.0"}
_FALSE = {"off", "false", "no", "n", "0", "0.0", "none"}
#: Recompute cell: the first keyword found (case-insensitive) gives the granularity.
_RECOMPUTE: tuple[tuple[str, Recompute], ...] = (
    (r"selective", "selective"), (r"full|uniform|block|checkpoint|\byes\b|\btrue\b", "full"),
    (r"\bnone\b|\bno\b|\boff\b|\bfalse\b", "none"))
#: Zero cell: a stage number after zero/stage, a bare number, or a sharding word (first found wins).
_SHARD_WORDS: tuple[tuple[str, int], ...] = (
    (r"shard_grad_op", 2), (r"fsdp|full_shard|fully_shard|hsdp|hybrid_shard", 3),
    (r"distributed[\s_-]*optimi[sz]er|dist[\s_-]*opt", 1))
#: FP8 scaling recipe named in a precision cell (first match wins): the recipe names, NeMo's performance-summary labels
#: (FP8-MX, FP8-CS, FP8-DS, FP8-SS), Megatron-Bridge's recipe names (..._mxfp8_..., fp8_current_scaling,
#: fp8_delayed_scaling, fp8_subchannel_scaling) and torchao's (rowwise and tensorwise scaling: rowwise scales per
#: row, priced as the block recipe).
_FP8_RECIPES: tuple[tuple[str, Fp8Recipe], ...] = (
    (r"nvfp4|\bfp4\b|e2m1", "nvfp4"),
    (r"mxfp8|fp8[-_ ]?mx\b|\bmx\b", "mxfp8"),
    (r"blockwise|block[-_ ]?scal|sub[-_ ]?channel|fp8[-_ ]?ss\b|fp8[-_ ]?sb\b|rowwise|row[-_ ]?wise", "blockwise"),
    (r"tensorwise|tensor[-_ ]?wise|current[-_ ]?scaling|fp8[-_ ]?cs\b", "tensorwise"),
    (r"delayed|fp8[-_ ]?ds\b", "delayed"),
)


def row_defaults(framework: str) -> dict[str, Any]:
    """Defaults for the empty cells of a row run by ``framework``."""
    return ROW_DEFAULTS | FRAMEWORK_ROW_DEFAULTS.get(framework, {})


# ---- cells --------------------------------------------------------------------------------------------------------
def _text(row: pd.Series, key: str) -> str | None:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    s = str(v).strip()
    return s or None


def _int(row: pd.Series, key: str) -> int | None:
    s = _text(row, key)
    if s is None:
        return None
    try:
        x = parse_number(s)
    except ValueError:
        raise RowError(f"{key}: {s!r} is not an integer") from None
    if not x.is_integer() or x < 0:
        raise RowError(f"{key}: {s!r} is not a non-negative integer")
    return int(x)


def _required_int(row: pd.Series, key: str) -> int:
    x = _int(row, key)
    if x is None:
        raise RowError(f"{key}: empty (every row needs it)")
    return x


def _switch(row: pd.Series, key: str) -> bool | None:
    s = _text(row, key)
    if s is None:
        return None
    if s.lower() in _TRUE or s.lower() in _FALSE:
        return s.lower() in _TRUE
    raise RowError(f"{key}: {s!r} is not on/off")


def _recompute(row: pd.Series) -> Recompute | None:
    s = _text(row, "recompute")
    if s is None:
        return None
    for pattern, value in _RECOMPUTE:
        if re.search(pattern, s, re.IGNORECASE):
            return value
    raise RowError(f"recompute: {s!r} is not full, selective or none")


def _zero(row: pd.Series) -> int | None:
    s = _text(row, "zero")
    if s is None:
        return None
    low = s.lower()
    if low in _FALSE:
        return 0
    found = re.search(r"(?:zero|stage)[\s_-]*([0-3])(?!\d)", low) or re.fullmatch(r"([0-3])(?:\.0)?", low)
    if found is not None:
        return int(found.group(1))
    for pattern, stage in _SHARD_WORDS:
        if re.search(pattern, low):
            return stage
    raise RowError(f"zero: {s!r} is not a ZeRO stage (none, 1, 2, 3, fsdp)")


def _fp8_recipe(row: pd.Series) -> Fp8Recipe | None:
    """The low-precision recipe named in the precision cell (nvfp4, mxfp8, blockwise, tensorwise, delayed), if
    any; an FP4 cell is low-precision training with the NVFP4 recipe."""
    text = _text(row, "precision") or ""
    return next((r for pattern, r in _FP8_RECIPES if re.search(pattern, text, re.IGNORECASE)), None)


#: Precision cell: the first keyword found (case-insensitive) gives the training precision (torchtitan and
#: torchao write FP8 as float8; Transformer Engine's formats are e4m3/hybrid; FP4 / NVFP4 / e2m1 is low-precision
#: training with the nvfp4 recipe).
_PRECISION: tuple[tuple[str, Precision], ...] = (
    ("fp8", "fp8"), ("float8", "fp8"), ("e4m3", "fp8"), ("fp4", "fp8"), ("e2m1", "fp8"), ("bf16", "bf16"),
    ("bfloat16", "bf16"), ("fp16", "fp16"),
    ("float16", "fp16"), ("fp32", "fp32"), ("float32", "fp32"), ("tf32", "fp32"))
#: A cell that says mixed precision without naming the 16-bit type ("AMP", "mixed"): the framework's default.
_MIXED_UNNAMED = re.compile(r"\bamp(?=\b|_)|mixed", re.IGNORECASE)


def _precision(row: pd.Series) -> Precision | None:
    s = _text(row, "precision")
    if s is None:
        return None
    low = s.lower()
    for key, value in _PRECISION:
        if key in low:
            return value
    if _MIXED_UNNAMED.search(s):
        return None  # the framework's default 16-bit type, noted as such
    raise RowError(f"precision: {s!r} is not fp32, fp16, bf16, fp8 or fp4 (nvfp4)")


# ---- system -------------------------------------------------------------------------------------------------------
def row_system(row: pd.Series) -> tuple[System, list[str]]:
    """The system preset of the row's GPU with its node and NIC cells applied."""
    gpu = _text(row, "gpu") or ""
    found = system_for_gpu(gpu)
    if found is None:
        known = ", ".join(k.upper() for k in SYSTEM_FOR_GPU_KEY)
        raise RowError(f"gpu: no system preset for {gpu!r} (SXM parts with a preset: {known})")
    preset, gpu_fields = found
    system = load_system(preset)
    notes = [f"system {preset}" + (f" ({gpu_fields['name']})" if gpu_fields else "")]
    if gpu_fields:
        system = system.replace(gpu=system.gpu.replace(**gpu_fields))
    node, network = system.node, system.network
    gpn, nics, gbps = _int(row, "gpus_per_node"), _int(row, "nic_per_node"), _text(row, "nic_gbps")
    if gpn == NVL_TRAY_GPUS and node.gpus_per_node > NVL_TRAY_GPUS * 2:
        notes.append(f"gpus_per_node {gpn} is a compute tray of the {node.gpus_per_node}-GPU NVLink domain")
        nics = None if nics is None else nics * node.gpus_per_node // gpn
    elif gpn is not None:
        node = node.replace(gpus_per_node=gpn)
    if nics is not None:
        network = network.replace(nics_per_node=nics)
    if gbps is not None:
        try:
            network = network.replace(nic_bandwidth=parse_number(gbps) * 1e9 / 8)
        except ValueError:
            raise RowError(f"nic_gbps: {gbps!r} is not a number") from None
    return system.replace(node=node, network=network), notes


# ---- model --------------------------------------------------------------------------------------------------------
@cache
def _presets() -> tuple[tuple[str, Model], ...]:
    out = []
    for name in list_models():
        token = re.match(r"[a-z]+", name)
        if token is not None:
            out.append((token.group(0), load_model(name)))
    return tuple(out)


def matching_preset(name: str, layers: int | None, hidden: int, heads: int, kv: int | None) -> Model | None:
    """The model preset of this shape whose family name (leading letters) occurs in the row's model name (the one
    whose whole name occurs in it first); ``layers`` None: of any depth."""
    flat = re.sub(r"[^a-z0-9]", "", name.lower())
    found = [m for token, m in _presets()
             if token in flat and (m.hidden_size, m.num_attention_heads) == (hidden, heads)
             and layers in (None, m.num_layers) and (kv is None or kv == m.query_groups)]
    named = [m for m in found if re.sub(r"[^a-z0-9]", "", m.name) in flat]  # prefer the preset the name spells out
    return (named or found or [None])[0]


def _dropout(family: Family, framework: str) -> dict[str, Any]:
    """The family's dropout (GPT under Megatron-Core / NeMo: none, as their GPT configs)."""
    if family.name == "gpt" and framework in NO_DROPOUT_GPT_FRAMEWORKS:
        return {"hidden_dropout": 0.0, "attention_dropout": 0.0}
    return {k: v for k, v in family.fields.items() if k in ("hidden_dropout", "attention_dropout")}


def row_model(row: pd.Series, framework: str) -> tuple[Model, list[str]]:
    """The row's model: a preset of the same shape, else the family rules of the model name."""
    name = _text(row, "model") or "custom"
    layers, hidden, heads = (_required_int(row, k) for k in ("L", "h", "heads"))
    kv, ffn, vocab, seq = _int(row, "kv_heads"), _int(row, "ffn"), _int(row, "vocab"), _required_int(row, "seq")
    if NON_TRANSFORMER_NAME.search(name):
        raise RowError(f"model: {name!r} has state-space / recurrent (Mamba-style) layers, which trainsim does not "
                       "model (transformer blocks only)")
    preset = matching_preset(name, layers, hidden, heads, kv)
    depth_note: list[str] = []
    if preset is None and MOE_NAME.search(name) and (shallow := matching_preset(name, None, hidden, heads, kv)):
        # a mixture-of-experts model at another depth (benchmark proxies with fewer layers): the preset's layer,
        # experts and router at the row's layer count
        preset = shallow
        depth_note = [f"num_layers {layers} (the row's; the preset has {shallow.num_layers})"]
    if preset is not None:
        fields: dict[str, Any] = preset.model_dump(exclude={"name", "seq_length", "source", "approximations"})
        if kv is not None:
            fields["num_query_groups"] = kv
        if ffn is not None and not preset.is_moe:
            fields["ffn_hidden_size"] = ffn
        if vocab is not None:
            fields["vocab_size"] = vocab
        fields |= _dropout(family_of(preset.name), framework)
        fields["num_layers"] = layers
        return Model(name=name, seq_length=seq, **fields), [f"architecture of model preset {preset.name}",
                                                            *depth_note]
    if MOE_NAME.search(name):
        raise RowError(f"model: {name!r} looks like a mixture-of-experts model and no model preset has its shape "
                       f"(L={layers}, h={hidden}, heads={heads}); the schema has no expert columns")
    fam, why = family_of_shape(name, hidden, heads, ffn, kv)
    fields = {**fam.fields, **_dropout(fam, framework)}
    notes = [f"model family {fam.name}" + (f" (no family named: {why})" if why else "")]
    if ffn is None:
        ffn = megatron_swiglu_ffn(hidden) if fam.gated_ffn else 4 * hidden
        notes.append(f"ffn {ffn} (family default)")
    if vocab is None:
        vocab = fam.vocab or 50257
        notes.append(f"vocab {vocab} (family default)")
    return Model(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_query_groups=kv,
                 ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq, **fields), notes


# ---- parallelism --------------------------------------------------------------------------------------------------
_FIRST_LAST_FLAG = re.compile(r"decoder[-_](first|last)[-_]pipeline[-_]num[-_]layers[\s=:]+(\d+)", re.IGNORECASE)
_FIRST_LAST_TEXT = re.compile(r"(first|last)[\s-]+(?:pipeline[\s-]+)?stage\D{0,16}?(\d+)\s*(?:transformer\s+)?"
                              r"layers", re.IGNORECASE)


def _stated_first_last(notes: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for pattern in (_FIRST_LAST_FLAG, _FIRST_LAST_TEXT):
        for which, count in pattern.findall(notes):
            out.setdefault(f"{which.lower()}_stage_layers", int(count))
    return out


def pipeline_split(row: pd.Series, layers: int, pp: int, vpp: int, notes: str,
                   framework: Framework | None = None,
                   stated_layout: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Parallelism fields fixing how ``layers`` split over ``pp·vpp`` virtual stages (module docstring): a stack whose
    own split rule (``pipeline_layer_split``: DeepSpeed's balanced partition, torchtitan's weighted split) places
    this layer count needs no stated split."""
    layout = _text(row, "pipeline_layout")
    if layout is not None:
        return {"pipeline_layout": layout}, ["pipeline_layout column"]
    if stated_layout is not None:  # --pipeline-model-parallel-layout in the notes (notes_flags)
        return {"pipeline_layout": stated_layout}, [f"pipeline layout {stated_layout} (from the notes)"]
    cells = {k: v for k in ("first_stage_layers", "last_stage_layers") if (v := _int(row, k)) is not None}
    if cells:
        return cells, ["first/last stage layer columns"]
    stages = pp * vpp
    if layers % stages == 0:
        return {}, []
    stated = _stated_first_last(notes)
    if stated:
        return stated, ["first/last stage layers from the notes"]
    if framework is not None and _own_split(layers, pp, vpp, framework):
        return {}, [f"the stack's own pipeline split of {layers} layers ({framework.pipeline_layer_split})"]
    if (layers + 2) % stages == 0:
        return ({"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True},
                ["embedding and loss counted as one layer each in the pipeline split"])
    balanced = balanced_first_last(layers, pp, vpp)
    if balanced is not None:
        first, last, each = balanced
        return ({"first_stage_layers": first, "last_stage_layers": last},
                [f"first/last stage layers {first}/{last} (unstated; {layers} layers do not divide over pp·vpp = "
                 f"{stages}: the middle stages hold {each} each, the first and last the rest)"])
    layout = weighted_layout(layers, pp, vpp)
    if layout is not None:
        return ({"pipeline_layout": layout},
                [f"pipeline layout {layout} (unstated; {layers} layers do not divide over pp·vpp = {stages}: the "
                 "embedding and the loss weigh one layer each, the virtual stages as even as that allows)"])
    raise RowError(f"L: {layers} layers do not divide over pp·vpp = {stages}, nor with the embedding and loss "
                   f"counted as layers ({layers + 2}); state the first/last stage layers (notes or "
                   "first_stage_layers/last_stage_layers columns)")


def _own_split(layers: int, pp: int, vpp: int, framework: Framework) -> bool:
    """Whether the stack's split rule places ``layers`` over ``pp·vpp`` virtual stages by itself."""
    try:
        virtual_stage_layers(layers, Parallelism(pp=pp, vpp=vpp), framework.pipeline_layer_split,
                             framework.pipeline_engine)
    except TrainsimError:
        return False
    return True


def weighted_layout(layers: int, pp: int, vpp: int) -> str | None:
    """A ``--pipeline-model-parallel-layout`` for interleaved runs whose layers neither divide over ``pp·vpp`` nor
    split into first/last stage counts that are multiples of ``vpp`` (DeepSeek-V3's 61 layers over 8, 16 or 32
    virtual stages in Megatron-Bridge's recipes, which state a layout): the embedding and the loss weigh one layer
    each, as Megatron-Core's ``account_for_embedding/loss_in_pipeline_split`` count them, and the ``layers + 2``
    units spread as evenly as possible over the virtual stages, the extra ones on the stages after the first.
    ``None`` without interleaving (:func:`balanced_first_last` places those) or when a stage would hold nothing
    but the embedding and the loss."""
    if vpp < 2:
        return None
    stages = pp * vpp
    base, extra = divmod(layers + 2, stages)
    counts = [base + (0 < i <= extra) - (i == 0) - (i == stages - 1) for i in range(stages)]
    if min(counts) < 0:
        return None
    chunks = ["t" * n for n in counts]
    chunks[0], chunks[-1] = "E" + chunks[0], chunks[-1] + "L"
    return "|".join(chunks)


def balanced_first_last(layers: int, pp: int, vpp: int) -> tuple[int, int, int] | None:
    """(first, last, middle) stage layer counts of an uneven split a record leaves unstated: the fewest layers on
    every middle stage that leave the first and last stages no more (they also hold the embedding and the head, as
    Megatron-Core's ``--decoder-first/last-pipeline-num-layers`` are used), the remainder split between them, one
    more on the first; every count a multiple of ``vpp`` (Megatron's rule for interleaving). ``None``: no such
    split (e.g. pp < 2)."""
    if pp < 2:
        return None
    each = -(-layers // pp)
    while (pp - 2) * each <= layers and each <= layers:  # bounded: with pp = 2 there are no middle stages
        rest = layers - (pp - 2) * each
        last = (rest // 2) // vpp * vpp
        first = rest - last
        if each % vpp == 0 and first % vpp == 0 and 0 < last <= first <= each:
            return first, last, each
        each += 1
    return None


def _pick(key: str, cell: Any, stated: dict[str, Any], default: Any, assumed: list[str] | None) -> Any:
    """The row's cell; else the setting stated in the notes; else the default (noted in ``assumed``)."""
    if cell is not None:
        return cell
    if key in stated:
        if assumed is not None:
            assumed.append(f"{key} {stated[key]} (from the notes)")
        return stated[key]
    if assumed is not None:
        assumed.append(f"{key} {default} (framework default)")
    return default


def default_vpp(framework: Framework, layers: int, pp: int) -> int | None:
    """Virtual stages a run of ``framework`` uses when its record leaves ``vpp`` empty (``None``: not interleaved).

    ``slot-per-chunk`` (Meta's Llama 3 stack): one slot per model chunk, the slots being the layers plus the embedding
    and the loss where the profile's split rule counts them as layers; only when the slots divide over ``pp``.
    """
    if framework.virtual_stages_default != "slot-per-chunk" or pp < 2:
        return None
    slots = split_slots(layers, framework.pipeline_layer_split)
    return slots // pp if slots % pp == 0 and slots // pp > 1 else None


def row_parallelism(row: pd.Series, layers: int, sp_default: bool, notes: str,
                    stated: dict[str, Any], framework: Framework | None = None) -> tuple[Parallelism, list[str]]:
    """Parallel degrees (empty: 1, or the framework's default virtual stages; dp from the GPU count), sequence
    parallelism and the pipeline split."""
    tp, pp, vpp, cp = (_int(row, k) or 1 for k in ("tp", "pp", "vpp", "cp"))
    assumed: list[str] = []
    ep = int(_pick("ep", _int(row, "ep"), stated, 1, assumed if "ep" in stated else None))
    etp = stated.get("etp")
    gpus = _int(row, "num_gpus")
    if etp is None and ep > 1 and tp > 1 and gpus and (gpus // pp) % (ep * tp):
        # Megatron's default expert TP is tp, but the expert grid ep·etp must divide tp·cp·dp: a run that could not
        # have used it ran expert TP 1 (what Megatron-Bridge's MoE recipes set: expert_tensor_parallel_size=1)
        etp = 1
        assumed.append(f"etp 1 (unstated; ep {ep} × tp {tp} does not divide the {gpus // pp} GPUs of a stage)")
    if _int(row, "vpp") is None and (v := stated_vpp(stated, layers, pp)) is not None:
        vpp = v
        assumed.append(f"vpp {v} (from the notes)")
    elif _int(row, "vpp") is None and framework is not None and (v := default_vpp(framework, layers, pp)) is not None:
        vpp = v
        assumed.append(f"vpp {v} ({framework.name}: {framework.virtual_stages_default})")
    sp = bool(_pick("sp", _switch(row, "sp"), stated, sp_default, assumed if tp > 1 else None))
    split, split_notes = pipeline_split(row, layers, pp, vpp, notes, framework, stated.get("pipeline_layout"))
    levels = tuple(int(v) for v in str(stated.get("hierarchical_cp_sizes", "")).replace(",", " ").split())
    par = Parallelism(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, dp=_int(row, "dp"),
                      sequence_parallel=sp and tp > 1, hierarchical_cp_sizes=levels, **split)
    return par, assumed + split_notes


# ---- the row ------------------------------------------------------------------------------------------------------
#: Settings a row's source text may state (a paper or blog named after the technique: "ZeRO-3", "ZeRO-Offload").
SOURCE_STATED = ("zero", "optimizer_offload", "param_offload")


def _recompute_modules(stated: dict[str, Any]) -> tuple[RecomputeModule, ...]:
    """Megatron's ``--recompute-modules`` named in the notes, beyond ``core_attn`` (selective granularity; the notes
    rule matches Megatron's module names only)."""
    names = str(stated.get("recompute_modules", "")).replace(",", " ").split()
    return tuple(dict.fromkeys(cast(RecomputeModule, n) for n in names if n != "core_attn"))


def _training(row: pd.Series, d: dict[str, Any], notes: str, stated: dict[str, Any],
              sp: bool, dp: int) -> tuple[Training, list[str]]:
    """The row's training settings; the global batch and micro-batch made whole over ``dp`` (:func:`whole_batch`)."""
    assumed: list[str] = []
    precision: Precision = _pick("precision", _precision(row), stated, d["precision"], assumed)
    recompute: Recompute = _pick("recompute", _recompute(row), stated, d["recompute"], assumed)
    given_mbs = _int(row, "micro_batch") or stated.get("micro_batch")
    global_batch, fitted_mbs, batch_notes = whole_batch(_required_int(row, "global_batch"), dp, given_mbs or 1)
    if given_mbs is not None and fitted_mbs != given_mbs:
        mbs = fitted_mbs  # the stated micro-batch does not fit the global batch: noted in batch_notes
    else:
        default_mbs = max(1, global_batch // dp) if d["micro_batch"] == LOCAL_BATCH else d["micro_batch"]
        mbs = int(_pick("micro_batch", _int(row, "micro_batch"), stated, default_mbs, assumed))
    assumed += batch_notes
    zero = _pick("zero", _zero(row), stated, None, None)  # None: the profile's default stage
    ogr = stated.get("overlap_grad_reduce") or ("ddp impl=torch" in notes.lower()) or None
    opg = True if stated.get("overlap_param_gather") and (zero or 0) >= 1 else None
    tpo = True if stated.get("tp_comm_overlap") and sp else None
    training = Training(micro_batch_size=mbs, global_batch_size=global_batch,
                        seq_length=_required_int(row, "seq"), recompute_granularity=recompute, zero_stage=zero,
                        precision=precision, fp8_recipe=_fp8_recipe(row) if precision == "fp8" else None,
                        overlap_grad_reduce=ogr, overlap_param_gather=opg, tp_comm_overlap=tpo,
                        overlap_p2p_comm=d["overlap_p2p_comm"], attention=stated.get("attention"),
                        fp8_param_gather=bool(stated.get("fp8_param_gather")) and precision == "fp8"
                        and (zero is None or zero >= 1),
                        optimizer_cpu_offload="optimizer_offload" in stated,
                        optimizer_offload_fraction=stated.get("optimizer_offload", 1.0),
                        param_cpu_offload=bool(stated.get("param_offload")),
                        moe_token_dispatcher=stated.get("moe_token_dispatcher", "alltoall"),
                        moe_a2a_overlap=bool(stated.get("moe_a2a_overlap")),
                        recompute_modules=_recompute_modules(stated))
    assumed += [f"{k} (from the notes)" for k in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
                if getattr(training, k) and stated.get(k)]
    if training.recompute_modules:
        assumed.append(f"recompute modules {','.join(training.recompute_modules)} (from the notes)")
    if training.moe_a2a_overlap:
        assumed.append("expert all-to-all overlapped with another micro-batch (from the notes)")
    if "moe_token_dispatcher" in stated:
        assumed.append(f"{stated['moe_token_dispatcher']} token dispatcher (from the notes)")
    if training.param_cpu_offload:
        assumed.append("parameters, gradients and optimizer offloaded to the CPU (stated in the source or notes)")
    elif training.offloaded_fraction:
        assumed.append(f"optimizer offloaded to the CPU: fraction {training.offloaded_fraction:g} "
                       "(stated in the source or notes)")
    if training.attention and stated.get("attention"):
        assumed.append(f"attention {training.attention} (from the notes)")
    return training, assumed


def whole_batch(global_batch: int, dp: int, micro_batch: int) -> tuple[int, int, list[str]]:
    """The global batch and micro-batch a row's run can take, and the note when they are not the stated ones.

    Megatron-style engines need ``global_batch`` to be a multiple of ``micro_batch·dp``. A record whose global batch
    holds fewer than ``micro_batch`` sequences per replica but a whole number of them ran that number in one
    micro-batch (the global batch is the measured quantity); otherwise (a batch quoted in round tokens, such as
    OPT's 2M tokens on 992 GPUs) it is predicted with the nearest multiple and its measured time scaled by the same
    ratio, i.e. compared at the measured throughput."""
    step = dp * micro_batch
    if global_batch % step == 0:
        return global_batch, micro_batch, []
    if global_batch < step and global_batch % dp == 0:
        local = global_batch // dp
        return global_batch, local, [f"micro_batch {local} instead of {micro_batch} (the global batch of "
                                     f"{global_batch} holds {local} per data-parallel replica)"]
    used = max(step, round(global_batch / step) * step)
    return used, micro_batch, [f"global_batch {used} instead of {global_batch} (not a multiple of micro_batch·dp = "
                               f"{step}); the measured time scaled by {used}/{global_batch}, i.e. compared at the "
                               "measured throughput"]


def _measured_column(row: pd.Series) -> str:
    return next((c for c in MEASURED_COLUMNS if _text(row, c) is not None), "no measured column")


def generic_measurement(row: pd.Series, source: str) -> Measurement:
    """A row of any source as a measurement; raises :class:`RowError` (or ``ValueError``) with the reason."""
    rid = str(row["id"])
    notes = _text(row, "notes") or ""
    tp, pp, cp = (_int(row, k) or 1 for k in ("tp", "pp", "cp"))
    unmodelled = UNMODELLED_OFFLOAD.search(notes) or UNMODELLED_OFFLOAD.search(_text(row, "source") or "")
    if unmodelled:
        raise RowError(f"notes: {unmodelled.group(0)!r}: offloading to NVMe is not modelled; trainsim models "
                       "offloading to the host CPU only")
    stated = notes_flags(notes)
    # what the source's own documentation gives for all of its runs fills the cells this row leaves empty
    conventions = [c for c in source_conventions(_text(row, "source") or "")
                   if c.key not in stated and _text(row, c.key) is None]
    if conventions:
        row = row.copy()
        for c in conventions:
            row[c.key] = c.value
    # "DeepSpeed ZeRO-3 ..." or "ZeRO-Offload" in the source: the stage and the offloading the run used
    in_source = {k: v for k, v in notes_flags(_text(row, "source") or "").items()
                 if k in SOURCE_STATED and k not in stated}
    stated |= in_source
    fp8 = (_precision(row) or stated.get("precision")) == "fp8"
    zero = _zero(row)
    ep = _int(row, "ep") or int(stated.get("ep", 1))
    fw_name, rule = infer_framework(_text(row, "framework"), _text(row, "source") or "", notes, (tp, pp, cp, ep), fp8,
                                    zero if zero is not None else stated.get("zero"))
    framework = load_framework(fw_name)
    implied_zero = offload_settings(stated, framework)
    if "sharding_strategy" not in stated and "sharding_strategy" in notes_flags(_text(row, "zero") or ""):
        stated["sharding_strategy"] = "hybrid"  # a zero cell written HYBRID_SHARD / HSDP
    switched = {k: stated[k] for k in FRAMEWORK_NOTES if k in stated}
    if switched:  # torch.compile / CUDA graphs named in the notes
        framework = framework.replace(**switched)
    stack_notes: list[str] = []
    named = sdpa_kernel_named(notes, _text(row, "source") or "")
    if named and "flash_kernel" not in stated and framework.transformers_model_code:
        # SDPA's backend order depends on the PyTorch release: cuDNN attention from 2.11 on, its flash kernel before
        framework = framework.replace(flash_kernel=named[1])
        stack_notes.append(f"flash kernel {named[1]} (SDPA under PyTorch {named[0]})")
    if framework.main_params_dtype == "param" and _MIXED_UNNAMED.search(_text(row, "precision") or ""):
        # automatic mixed precision (torch.autocast) keeps the model's parameters, gradients and optimizer states in
        # fp32 and computes in 16-bit: not the stack's bf16-parameter default
        framework = framework.replace(main_params_dtype="fp32", exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32",
                                      grad_reduce_dtype="fp32")
        stack_notes.append("fp32 parameters, gradients and optimizer states (mixed precision: torch.autocast)")
    d = row_defaults(framework.name)
    system, sys_notes = row_system(row)
    if system.gpu.peak_flops.bf16 is None:
        d = {**d, "precision": "fp16"}  # the only 16-bit tensor-core type of the GPU (Volta)
    model, model_notes = row_model(row, framework.name)
    sp_default = d["sp"] or framework.tp_shards_sequence  # torchtitan's and Meta's TP always shard the sequence
    par, par_notes = row_parallelism(row, model.num_layers, sp_default, notes, stated, framework)
    stated_layout = _text(row, "pipeline_layout") or stated.get("pipeline_layout")
    if model.mtp_num_layers and stated_layout and "m" not in stated_layout:
        # Megatron places multi-token prediction in the layout ('m'): a stated layout without it ran without MTP
        model = model.replace(mtp_num_layers=0)
        model_notes.append("mtp 0 (the stated pipeline layout has no MTP stage)")
    num_gpus = _required_int(row, "num_gpus")
    dp = par.dp or max(1, num_gpus // (par.tp * par.pp * par.cp))
    training, tr_notes = _training(row, d, notes, stated, par.sequence_parallel, dp)

    free_recompute = _recompute(row) is None and "recompute" not in stated
    free_mbs = d["micro_batch"] == LOCAL_BATCH and _int(row, "micro_batch") is None and "micro_batch" not in stated

    stated_notes = tr_notes

    def fit_with(parallelism: Parallelism, recompute: bool = True,
                 tr: Training | None = None) -> tuple[Job, list[str]]:
        def build(t: Training) -> Job:
            return Job(model=model, system=system, parallelism=parallelism, training=t, num_gpus=num_gpus,
                       framework=framework)

        base = training if tr is None else tr
        return fitting_job(build, base, stated_notes, free_recompute and recompute, free_mbs,
                           free_zero=base.zero_stage is None)

    job, tr_notes = fit_with(par)
    if par.tp > 1 and not par.sequence_parallel and _switch(row, "sp") is None and "sp" not in stated:
        job, tr_notes, par_notes = sequence_parallel_that_fits(job, tr_notes, par_notes, fit_with)
    if implied_zero:  # the offloading's stage was not named: the run ran, so it sharded as far as it had to
        job, tr_notes, training = offload_stage_that_fits(job, tr_notes, training, framework, fit_with,
                                                           lambda tr: stated.update(zero=tr.zero_stage))
    if model.is_moe and _int(row, "ep") is None and "ep" not in stated:
        job, tr_notes, ep_note = expert_parallel_that_fits(job, tr_notes, fit_with)
        par_notes += ep_note
    eq3 = job.training.recompute_granularity != "none" if reports_eq3(framework.name, framework.label) else None
    # a global batch made whole is compared at the measured throughput
    batch_ratio = training.global_batch_size / _required_int(row, "global_batch")
    measured = measured_iteration_time(row, model, system, training.precision, eq3) * batch_ratio
    if _zero(row) is None and implied_zero:
        if not any(n.startswith("zero 3 ") for n in tr_notes):
            tr_notes.append(f"zero {stated['zero']} (unstated; the stage the stated offloading runs on)")
    elif _zero(row) is None and "zero" in stated:
        tr_notes.append(f"zero {stated['zero']} (named in the {'source' if 'zero' in in_source else 'notes'})")
    elif training.zero_stage is None and not any(n.startswith("zero ") for n in tr_notes):
        tr_notes.append(f"zero {job.training.zero_stage} (the profile's default stage)")
    assumptions = (f"framework {framework.label} ({rule})",
                   *[f"{k} {v} (stated in the row)" for k, v in switched.items()],
                   *[f"{c.key} {c.value} ({c.label}: {c.why})" for c in conventions],
                   *stack_notes, *sys_notes, *model_notes, *par_notes, *tr_notes,
                   f"measured time from {_measured_column(row)}" + (" (SC'21 Eq. 3 FLOPs)" if eq3 is not None else ""))
    return Measurement(rid, source, job, measured, notes, assumptions)
