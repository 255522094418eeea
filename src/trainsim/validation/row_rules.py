"""Documented rules that turn a measurement row of any source into a job: framework, system and model family.

The tables below are data, read in order (first match wins); adding a framework, a GPU or a model family is one line.
They are used for rows whose source is not one of the four packaged ones (:mod:`trainsim.validation.measurements`
keeps those exactly as before); every choice is reported with the row (``Measurement.assumptions``) and listed in
docs/VALIDATION.md, section "Settings chosen for cells the sources leave empty".

**Framework** (:func:`infer_framework`): an optional ``framework`` column (``NAME[@version]``, any preset of
``presets/frameworks``, or a stack in words such as ``NeMo 25.04``, matched by the keyword table) wins. Else
:data:`FRAMEWORK_KEYWORDS` is matched against the ``source`` text, then against the ``notes``: Megatron-DeepSpeed before
DeepSpeed, NeMo / Megatron-Bridge, torchtitan, Meta's Llama 3 paper (``meta-llama3`` when that profile is shipped, else
``megatron-core``), DeepSpeed / ZeRO-3, FSDP / llm-foundry / accelerate, Hugging Face transformers (by year: the
transformers models of 2023 and earlier attend eagerly, ``hf-transformers@4.35``, ``deepspeed@0.12``, ``fsdp@2.1``;
DeepSpeed of 2021 is ``deepspeed@0.3``), Megatron-Core /
MCore named as such (``megatron-core``), Megatron-LM (by the first year in the text: 2021 or earlier is
``megatron-lm-2021``; 2022 and 2023 ``megatron-lm-2021@3.0``, the legacy ``megatron/model`` code path that Megatron-LM
ran by default until Megatron-Core models became its default in 2024 - as do rows naming ``--use-legacy-models`` or
vTrain, whose runs used those layers - unless the row runs FP8 or names Transformer Engine or ``--use-mcore-models``,
which only Megatron-Core provides; else ``megatron-core``). Entries whose profile is
not shipped are skipped. No match: the default stack ``megatron-core``, reported as a fallback.

**Source conventions** (:data:`SOURCE_CONVENTIONS`): a setting a named source's own documentation gives for all of
its runs (vTrain's validation configs: activation checkpointing on every run, 8 GPUs and 800 Gb/s per node, GPT-2's
vocabulary) fills the cell its rows leave empty.

**System** (:func:`system_for_gpu`): the ``gpu`` cell normalised by :func:`trainsim.cost.tables.gpu_key`, looked up
in :data:`SYSTEM_FOR_GPU_KEY`. An A100 whose name says 40GB is the DGX-A100 40GB part (40 GiB HBM2 at 1555 GB/s,
A100 datasheet); an H100 whose name says HBM2e, 95/96 GB, 500 W or Grand Teton is Meta's power-limited Grand Teton
part (:data:`GPU_VARIANTS`, preset ``grand-teton-h100``). PCIe / NVL form factors and GPUs without a preset are not
predictable (reported, not guessed).

**Model family** (:func:`family_of`): :data:`FAMILIES` by the model name; each family gives the architecture the
measurement schema has no column for and the vocabulary when the ``vocab`` cell is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainsim.cost.attention_kernels import sdpa_kernel
from trainsim.spec.framework import FlashKernel, list_frameworks
from trainsim.spec.pipeline_split import vpp_from_layers_per_chunk

MEGATRON_2021_LAST_YEAR = 2021  # the SC'21 code (synchronous input-gradient all-reduce)
#: Megatron-LM built its models from the legacy ``megatron/model`` code (``--transformer-impl local`` the default, the
#: Megatron-Core GPT model behind the opt-in ``--use-mcore-models``) until Megatron-Core models became the default in
#: 2024 (``--use-legacy-models`` from then on; Megatron-LM issue #703, Feb 2024: the converted Llama-2 checkpoint is
#: still a legacy model); that code path is the 2022 profile version.
MEGATRON_LEGACY_LAST_YEAR = 2023
#: Text that says a Megatron-LM run used Megatron-Core's Transformer Engine layers whatever its year (``--fp8-format``
#: needs ``--transformer-impl transformer_engine``).
_MCORE_STATED = re.compile(r"transformer[-_ ]?engine|--use-mcore-models|\bte\b", re.IGNORECASE)
#: Text that says a Megatron-LM run used the legacy ``megatron/model`` layers whatever its year: Megatron-LM's
#: ``--use-legacy-models`` (2024 on), or a vTrain measurement (Bang et al., MICRO 2024: its simulator's model code,
#: ``src/model/gpt_modeling.py``, is Megatron-LM's legacy GPT layer - apex MixedFusedLayerNorm, baddbmm +
#: FusedScaleMaskSoftmax + dropout + bmm, jit bias-GeLU and bias-dropout-add - the code its runs were validated on).
_LEGACY_STATED = re.compile(r"--use-legacy-models|\bvtrain\b", re.IGNORECASE)


@dataclass(frozen=True)
class FrameworkRule:
    """``pattern`` (regex, case-insensitive) found in the text selects ``framework`` (or, when that profile is not
    shipped, ``otherwise``; or ``extended`` when the row uses a parallelism the profile does not offer; or
    ``sharded`` when the row's ZeRO stage is one the profile does not offer); ``label`` says in words what the
    pattern matches."""

    label: str
    pattern: str
    framework: str
    otherwise: str | None = None
    extended: str | None = None
    sharded: str | None = None  # the stack that ran these models with a ZeRO stage this one does not offer


#: Ordered: the first rule whose pattern occurs in the text wins. ``megatron-by-year`` is resolved by the year.
FRAMEWORK_KEYWORDS: tuple[FrameworkRule, ...] = (
    FrameworkRule("Megatron-DeepSpeed", r"megatron[-_ ]?deepspeed", "megatron-deepspeed"),
    # NeMo's PyTorch backend (FSDP2 over transformers-style models) before NeMo's Megatron stack
    FrameworkRule("NeMo AutoModel", r"\bautomodel\b|\bnemo[-_ ]?automodel\b", "nemo-automodel"),
    FrameworkRule("NeMo, Megatron-Bridge", r"\bnemo\b|megatron[-_ ]?bridge", "nemo"),
    FrameworkRule("torchtitan", r"torchtitan", "torchtitan-by-year"),
    # 'The Llama 3 Herd of Models': Meta's stack (TP, CP, PP and FSDP-style sharding); until its profile ships, the
    # Megatron-Core profile (same 4D parallelism, sharded optimizer from the zero column)
    FrameworkRule("Llama 3 paper (Herd of Models, Llama Team, Meta + Llama 3)",
                  r"herd of models|llama team|\bmeta\b.{0,40}llama[\s-]*3|llama[\s-]*3.{0,40}\bmeta\b",
                  "meta-llama3", "megatron-core"),
    # DeepSpeed trains with tensor parallelism through Megatron (the ZeRO and ZeRO-Infinity papers: Megatron-LM model
    # parallelism + ZeRO); FSDP with TP, PP or CP is PyTorch's DTensor/pipelining stack as torchtitan composes it
    FrameworkRule("DeepSpeed, ZeRO-3, ZeRO-Infinity", r"deepspeed|\bzero[-_ ]?(?:3|infinity)\b",
                  "deepspeed-by-year", extended="megatron-deepspeed"),
    FrameworkRule("llm-foundry, MosaicML, Composer", r"llm[-_ ]?foundry|mosaic[-_ ]?ml|\bcomposer\b",
                  "llm-foundry-by-year", extended="torchtitan"),
    FrameworkRule("FSDP, FSDP2, accelerate", r"\bfsdp2?\b|\baccelerate\b", "fsdp-by-year", extended="torchtitan"),
    FrameworkRule("Hugging Face, transformers", r"hugging ?face|\btransformers\b", "hf-transformers-by-year"),
    FrameworkRule("Megatron-Core, MCore", r"megatron[-_ ]?core|\bmcore\b", "megatron-core"),
    # Megatron-LM's models with a ZeRO stage its code did not offer ran on DeepSpeed (DeepSpeedExamples'
    # Megatron-LM-v1.1.5-ZeRO3, the SC'21 paper's ZeRO-3 baseline; Megatron-DeepSpeed with tensor parallelism)
    FrameworkRule("Megatron-LM", r"megatron[-_ ]?lm", "megatron-by-year", sharded="deepspeed-by-year"),
    # vTrain's measurements (MICRO 2024) ran Megatron-LM's legacy layers (see _LEGACY_STATED)
    FrameworkRule("vTrain (Megatron-LM runs)", r"\bvtrain\b", "megatron-by-year"),
)
FALLBACK_FRAMEWORK = "megatron-core"
_YEAR = re.compile(r"(?<!\d)(20[0-3]\d)(?!\d)")
#: A venue with a two-digit year ("SC21", "SC'21", "MLSys'23", "NeurIPS 22"): the year 20yy.
_VENUE_YEAR = re.compile(r"\b(?:SC|MLSys|NeurIPS|ICML|ICLR|OSDI|SOSP|NSDI|ATC|EuroSys|PPoPP|ASPLOS|ISCA|MICRO|HPCA|"
                         r"SIGCOMM|VLDB|KDD|ACL|EMNLP)\s?['’]?(\d{2})\b")
#: DeepSpeed releases before ZeRO-3 overlapped its gathers (PR #1453, Oct 2021, released 2022): ``deepspeed@0.3``.
DEEPSPEED_2021_LAST_YEAR = 2021
#: torchtitan's train configs ran the Triton fused RMSNorm until PR #535 (August 2024): ``torchtitan@2024``.
TORCHTITAN_FUSED_NORM_LAST_YEAR = 2024
#: llm-foundry's ALiBi models ran the Triton FlashAttention-1 kernel until flash-attn 2.4.2 (December 2023):
#: ``llm-foundry@0.2``.
LLM_FOUNDRY_TRITON_LAST_YEAR = 2023
#: transformers made SDPA the default attention in 4.36 (December 2023); before, every model attended eagerly:
#: ``hf-transformers@4.35``.
TRANSFORMERS_EAGER_LAST_YEAR = 2023


def first_year(text: str) -> int | None:
    """The first year ``text`` names: a four-digit 20xx or a venue's two-digit year (``SC21``), whichever comes
    first."""
    hits = [(m.start(), int(m.group(1))) for m in _YEAR.finditer(text)]
    hits += [(m.start(), 2000 + int(m.group(1))) for m in _VENUE_YEAR.finditer(text)]
    return min(hits)[1] if hits else None


#: Stacks resolved by the year of a row alone: rule name -> ((last year, older stack) ascending, current stack).
DATED_STACKS: dict[str, tuple[tuple[tuple[int, str], ...], str]] = {
    "deepspeed-by-year": (((DEEPSPEED_2021_LAST_YEAR, "deepspeed@0.3"),
                           (TRANSFORMERS_EAGER_LAST_YEAR, "deepspeed@0.12")), "deepspeed"),
    "fsdp-by-year": (((TRANSFORMERS_EAGER_LAST_YEAR, "fsdp@2.1"),), "fsdp"),
    "torchtitan-by-year": (((TORCHTITAN_FUSED_NORM_LAST_YEAR, "torchtitan@2024"),), "torchtitan"),
    "llm-foundry-by-year": (((LLM_FOUNDRY_TRITON_LAST_YEAR, "llm-foundry@0.2"),), "llm-foundry"),
    "hf-transformers-by-year": (((TRANSFORMERS_EAGER_LAST_YEAR, "hf-transformers@4.35"),), "hf-transformers"),
}


def stack_by_year(rule_framework: str, text: str) -> str:
    """The stack of a :data:`DATED_STACKS` rule for a run described by ``text``: the first older one whose last year
    is not before the first year in it (``deepspeed@0.3``: per-parameter ZeRO-3 gathers after a device synchronize,
    list collectives; ``deepspeed@0.12`` and ``fsdp@2.1``: the transformers models of 2022-2023, eager attention;
    ``torchtitan@2024``: the train configs' Triton fused RMSNorm; ``llm-foundry@0.2``: MPT's ALiBi attention on the
    Triton FlashAttention-1 kernel; ``hf-transformers@4.35``: eager attention before SDPA became transformers'
    default), else the current one (also without a year)."""
    older, current = DATED_STACKS[rule_framework]
    year = first_year(text)
    if year is not None:
        for last, stack in older:
            if year <= last:
                return stack
    return current


def megatron_by_year(text: str, fp8: bool = False) -> str:
    """The Megatron-LM stack of a run described by ``text``: by the first year in it (module docstring); a run that
    uses FP8 or names Transformer Engine is on Megatron-Core's layers whatever the year."""
    year = first_year(text)
    if year is not None and year <= MEGATRON_2021_LAST_YEAR:
        return "megatron-lm-2021"
    legacy = (year is not None and year <= MEGATRON_LEGACY_LAST_YEAR) or _LEGACY_STATED.search(text) is not None
    if legacy and not fp8 and not _MCORE_STATED.search(text):
        return "megatron-lm-2021@3.0"
    return "megatron-core"


def lacks_parallelism(framework: str, tp: int, pp: int, cp: int, ep: int = 1) -> bool:
    """Whether the profile offers no tensor, pipeline, context or expert parallelism the row uses."""
    from trainsim.spec.framework import load_framework

    fw = load_framework(framework)
    return (tp > 1 and not fw.supports_tp) or (pp > 1 and fw.pipeline_engine == "none") or (
        cp > 1 and not fw.supports_cp) or (ep > 1 and not fw.supports_ep)


def lacks_zero_stage(framework: str, zero: int | None, pp: int) -> bool:
    """Whether the profile does not offer the row's ZeRO stage (together with pipelining when ``pp > 1``)."""
    from trainsim.spec.framework import load_framework

    if not zero:
        return False
    fw = load_framework(framework)
    return zero > (fw.max_zero_stage_with_pp if pp > 1 else fw.max_zero_stage)


def _resolve(rule_framework: str, text: str, fp8: bool) -> str:
    """A rule's stack, the by-year ones resolved from the first year in ``text``."""
    if rule_framework == "megatron-by-year":
        return megatron_by_year(text, fp8)
    if rule_framework in DATED_STACKS:
        return stack_by_year(rule_framework, text)
    return rule_framework


def _pick(rule: FrameworkRule, name: str, shipped: list[str], degrees: tuple[int, ...]) -> str | None:
    """``name``, or ``rule.extended`` when the row uses a parallelism ``name`` does not offer; None if not shipped."""
    if name.partition("@")[0] not in shipped:
        return None
    if rule.extended in shipped and lacks_parallelism(name, *degrees):
        return rule.extended
    return name


def _match(text: str, shipped: list[str], degrees: tuple[int, ...], fp8: bool = False,
           context: str = "", zero: int | None = None, sharded: bool = False) -> tuple[str, str] | None:
    """The first rule matching ``text`` whose stack offers the row's ZeRO stage (``sharded``: or whose rule names
    the stack that ran it with that stage)."""
    for rule in FRAMEWORK_KEYWORDS:
        found = re.search(rule.pattern, text, re.IGNORECASE)
        if found is None:
            continue
        name = _resolve(rule.framework, f"{text} {context}", fp8)
        preset = name.partition("@")[0]
        if preset in shipped and lacks_zero_stage(name, zero, degrees[1]):
            if rule.sharded is None or not sharded:
                continue  # a stack named later may offer the stage
            base = _resolve(rule.sharded, f"{text} {context}", fp8)
            owner = next(r for r in FRAMEWORK_KEYWORDS if r.framework == rule.sharded)
            alt = _pick(owner, base, shipped, degrees)
            if alt is not None:
                return alt, f"{found.group(0)!r} with ZeRO stage {zero}, which {name} does not offer"
            continue
        picked = _pick(rule, name, shipped, degrees)
        if picked is not None and picked != name:
            return picked, (f"{found.group(0)!r} with tp/pp/cp{'/ep' if len(degrees) > 3 else ''} {degrees} that "
                            f"{name} does not offer")
        if picked is not None:
            return name, repr(found.group(0))
        if rule.otherwise is not None:
            return rule.otherwise, f"{found.group(0)!r} ({name} not shipped)"
    return None


def infer_framework(cell: str | None, source: str, notes: str,
                    degrees: tuple[int, ...] = (1, 1, 1), fp8: bool = False,
                    zero: int | None = None) -> tuple[str, str]:
    """The row's framework and how it was chosen (``framework`` column, keyword in source/notes, or fallback).
    ``degrees``: the row's (tp, pp, cp) or (tp, pp, cp, ep), for rules whose profile has an ``extended`` stack;
    ``fp8``: the row runs FP8 (a Megatron-LM run of any year is then on Transformer Engine layers); ``zero``: the
    row's ZeRO stage - a stack that does not offer it yields to the first stack named in the source, then the notes,
    that does (a source's title may name the paper's own system while the notes describe the run's), else to its rule's
    ``sharded`` stack."""
    shipped = list_frameworks()
    if cell:
        if cell.partition("@")[0].strip().lower() in shipped or cell.endswith((".yaml", ".yml")):
            return cell, "framework column"
        # a framework written in words ("NeMo 25.04", "PyTorch FSDP2"); the notes may say Transformer Engine
        hit = _match(cell, shipped, degrees, fp8, f"{source} {notes}")
        if hit is not None:
            return hit[0], f"{hit[1]} in the framework column"
        return cell, "framework column"  # not a profile: the row is reported with the loader's reason
    context = f"{source} {notes}"  # the year of a by-year stack: the first one in the source, then the notes
    for sharded in (False, True) if zero else ():  # a stack that offers the row's ZeRO stage, then a rule's
        for where, text in (("source", source), ("notes", notes)):
            hit = _match(text, shipped, degrees, fp8, context, zero, sharded)
            if hit is not None:
                return hit[0], f"{hit[1]} in {where}"
    for where, text in (("source", source), ("notes", notes)):
        hit = _match(text, shipped, degrees, fp8, context)
        if hit is not None:
            return hit[0], f"{hit[1]} in {where}"
    return FALLBACK_FRAMEWORK, "fallback: no framework named in source or notes"


#: Stacks (``name`` or ``name@version``) whose reported TFLOP/s follow SC'21 Eq. 3 with the recompute factor (4 with
#: activation recomputation, else 3): the SC'21 code of 2021, Megatron-DeepSpeed's ``throughput_calculator`` and
#: DeepSpeed's examples (``checkpoint_activations_factor``). Every other stack reports model FLOPs: Megatron-LM from
#: 2022 on quotes MFU and HFU apart (Korthikanti et al.) and its ``num_floating_point_operations`` counts no recompute.
EQ3_FRAMEWORKS = frozenset({"megatron-lm-2021@2.5", "megatron-deepspeed", "deepspeed"})


def reports_eq3(name: str, label: str) -> bool:
    """Whether the stack ``name`` (version label ``label``) reports SC'21 Eq. 3 TFLOP/s (:data:`EQ3_FRAMEWORKS`)."""
    return name in EQ3_FRAMEWORKS or label in EQ3_FRAMEWORKS

_FP8_PARAM_GATHER = r"--fp8-param-gather\b|(?i:fp8_param_gather\W*true)"  # Megatron flag or NeMo config
#: FlashAttention-2 / -3 named in a row's text (flash-attn 2.x, attn_implementation, Megatron-DeepSpeed's flag).
_FA2 = r"(?i)flash[-_ ]?attention[-_ ]?2|flash[-_ ]?attn[-_ ]?v?2\b|\bFA-?2\b|--use-flash-attn-v2\b"
_FA3 = r"(?i)flash[-_ ]?attention[-_ ]?3|\bFA-?3\b"
#: FlashAttention-1 named: flash-attn 1.x, Megatron-DeepSpeed's --use-flash-attn-v1 / --use-flash-attn-triton (its
#: Triton port), llm-foundry's attn_impl triton.
_FA1 = (r"(?i)flash[-_ ]?attention[-_ ]?1\b|flash[-_ ]?attn[-_ ]?v?1(?:\.\d+)*\b|\bFA-?1\b"
        r"|--use-flash-attn-(?:v1|triton)\b|attn_impl\W{0,3}triton\b")
_FLEX = r"(?i)\bflex[-_ ]?(?:attn|attention)\b|\battn\W{0,3}flex\b"

#: CPU optimizer offloading in words: offload_optimizer, "optimizer (state) offload", ZeRO-Offload, CPU-Adam.
_OPTIMIZER_OFFLOAD = (r"(?i)offload[\s_-]*optimizer|(?<![-\w])optimizer[\s_-]*(?:states?[\s_-]*)?(?:cpu[\s_-]*)?"
                      r"offload|zero[\s_-]*offload|cpu[\s_-]*adam|cpu[\s_-]*offload|offload(?:ed|ing)?[\s_-]+to[\s_-]+"
                      r"(?:the[\s_-]+)?cpu")
#: Parameter offloading in words: DeepSpeed's offload_param, "parameter offload", FSDP's offload_params=True.
_PARAM_OFFLOAD = r"(?i)offload[\s_-]*params?\b(?!\W*(?i:false)\b)|param(?:eter)?s?[\s_-]*(?:cpu[\s_-]*)?offload"
#: Offloading trainsim does not model (to NVMe): a row that states it is not predicted.
UNMODELLED_OFFLOAD = re.compile(r"\bnvme\b|zero[\s_-]*infinity", re.IGNORECASE)
#: Not followed by a value that switches the setting off ("gradient_checkpointing=False").
_NOT_OFF = r"(?!\W*(?i:false|off|no|none|disabled)\b)"
#: Framework-profile fields a row's notes may switch on (the rest of NOTES_FLAGS are job settings).
FRAMEWORK_NOTES = ("torch_compile", "cuda_graphs", "sharding_strategy", "flash_kernel", "cp_comm_type",
                   "exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype", "reshard_after_forward",
                   "cross_entropy_impl")
#: A PyTorch version written in a row's text ("PyTorch 2.11", "torch==2.4.1", "torch 2.5").
TORCH_VERSION = re.compile(r"(?i)\b(?:pytorch|torch)\s*(?:==|v)?\s*(\d+\.\d+)(?:\.\d+)?\b")


def sdpa_kernel_named(*texts: str) -> tuple[str, FlashKernel] | None:
    """The PyTorch release the first of ``texts`` that names one names (:data:`TORCH_VERSION`), with the kernel
    library SDPA runs under it (:func:`trainsim.cost.attention_kernels.sdpa_kernel`); ``None`` when none does."""
    for text in texts:
        if m := TORCH_VERSION.search(text):
            return m.group(1), sdpa_kernel(m.group(1))
    return None
#: Megatron arguments named in a row's notes, applied to the cells the row leaves empty (first group: the value).
#: ``--overlap-param-gather`` needs the distributed optimizer and ``--tp-comm-overlap`` sequence parallelism
#: (Megatron ``arguments.py`` asserts both), so they imply them.
NOTES_FLAGS: tuple[tuple[str, str, Any], ...] = (
    (r"--sequence-parallel\b", "sp", True),
    (r"--use-distributed-optimizer\b", "zero", 1),
    (r"--overlap-grad-reduce\b", "overlap_grad_reduce", True),
    (r"--overlap-param-gather\b", "overlap_param_gather", True),
    (r"--overlap-param-gather\b", "zero", 1),
    (r"--tp-comm-overlap\b", "tp_comm_overlap", True),
    (r"--tp-comm-overlap\b", "sp", True),
    (_FP8_PARAM_GATHER, "fp8_param_gather", True),
    (_FP8_PARAM_GATHER, "zero", 1),  # needs the distributed optimizer
    (r"--recompute-granularity[=\s]+(full|selective)\b", "recompute", None),
    (r"--recompute-activations\b", "recompute", "selective"),
    (r"--recompute-modules[=\s]+((?:(?:core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts)\b[\s,]*)+)",
     "recompute_modules", None),
    (r"--checkpoint-activations\b", "recompute", "full"),
    (r"--use-flash-attn\b", "attention", "flash"),  # legacy Megatron-LM (2023): FlashAttention in CoreAttention
    # Hugging Face transformers: attn_implementation="eager" (the fp32 softmax chain on the s² scores; the default
    # for Llama before SDPA) or "sdpa" / "flash_attention_2"
    (r"(?i)attn_implementation\W*eager|\beager attention", "attention", "eager"),
    (r"(?i)attn_implementation\W*(?:sdpa|flash_attention_2)|flash[-_ ]?attention[-_ ]?2", "attention", "flash"),
    # FlashAttention named without a version ("flash attention", "FlashAttention", "flash-attn")
    (r"(?i)\bflash[-_ ]?(?:attention|attn)\b", "attention", "flash"),
    # the flash kernel library named (trainsim.cost.attention_kernels): FlashAttention-2 / -3, cuDNN attention
    (_FA3, "attention", "flash"),
    (_FA2, "flash_kernel", "fa2"),
    (_FA3, "flash_kernel", "fa3"),
    (_FA1, "attention", "flash"),
    (_FA1, "flash_kernel", "fa1"),
    # PyTorch FlexAttention (a Triton template kernel; the PyTorch blog "FlexAttention: The Flexibility of PyTorch
    # with the Performance of FlashAttention", Aug 2024: ~90 % of FlashAttention-2 forward, ~85 % backward) is
    # priced as FlashAttention-2, the library whose instructions it issues on Hopper
    (_FLEX, "attention", "flash"),
    (_FLEX, "flash_kernel", "fa2"),
    (r"(?i)cudnn[\s_-]*(?:fused[\s_-]*|flash[\s_-]*)?attention|--attention-backend[=\s]+fused\b", "flash_kernel",
     "cudnn"),
    # context parallelism's communication: Megatron's --cp-comm-type, DeepSpeed-Ulysses' all-to-all
    (r"--cp-comm-type[=\s]+(a2a\+p2p|p2p|all_gather|allgather|a2a)(?![\w+])", "cp_comm_type", None),
    (r"(?i)\bulysses\b|--ds-sequence-parallel-size\b", "cp_comm_type", "a2a"),
    # the MoE token dispatcher: DeepEP / HybridEP (Megatron-Core's flex dispatcher) or NCCL's all-to-all
    (r"(?i)\b(?:deep[-_ ]?ep|hybrid[-_ ]?ep)\b|--moe-token-dispatcher-type[=\s]+flex\b|--moe-enable-deepep\b"
     r"|\bflex (?:token )?dispatcher\b", "moe_token_dispatcher", "flex"),
    (r"--moe-token-dispatcher-type[=\s]+alltoall\b|(?i:\balltoall dispatcher\b)", "moe_token_dispatcher", "alltoall"),
    # FSDP2's reshard_after_forward as a recipe states it (torchtitan, NeMo AutoModel parallelizer configs)
    (r"(?i)\breshard_after_forward\W{0,3}true\b", "reshard_after_forward", True),
    (r"(?i)\breshard_after_forward\W{0,3}false\b", "reshard_after_forward", False),
    # NeMo AutoModel's MaskedCrossEntropy(fp32_upcast=...): the loss on the 16-bit logits or on an fp32 copy
    (r"(?i)\bfp32_upcast\W{0,3}false\b", "cross_entropy_impl", "torch_16bit"),
    (r"(?i)\bfp32_upcast\W{0,3}true\b", "cross_entropy_impl", "torch"),
    (r"--overlap-moe-expert-parallel-comm\b|(?i:\bmoe_a2a_overlap\W*(?:=|:)?\W*true\b)", "moe_a2a_overlap", True),
    (r"--hierarchical-context-parallel-sizes[=\s]+(\d+[\s,]+\d+)", "hierarchical_cp_sizes", None),
    (r"--fp8-format\b|--fp8\b", "precision", "fp8"),
    (r"--bf16\b", "precision", "bf16"),
    (r"--fp16\b", "precision", "fp16"),
    (r"--micro-batch-size[=\s]+(\d+)", "micro_batch", None),
    # interleaved pipeline: Megatron's virtual stages per rank (the layers-per-chunk form needs the layer count:
    # trainsim.validation.rows.row_parallelism), NeMo's virtual_pipeline_model_parallel_size, or in words
    (r"--num-virtual-stages-per-pipeline-rank[=\s]+(\d+)", "vpp", None),
    (r"--virtual-pipeline-model-parallel-size[=\s]+(\d+)|(?i:virtual_pipeline_model_parallel_size)\W*(\d+)", "vpp",
     None),
    (r"--num-layers-per-virtual-pipeline-stage[=\s]+(\d+)", "layers_per_virtual_stage", None),
    (r"(?i:\binterleav\w*[^.;]*?\b(\d+)[\s-]+virtual[\s-]+(?:pipeline[\s-]+)?(?:stages|chunks))", "vpp", None),
    (r"\bVP{1,2}[\s=:]*(\d+)\b", "vpp", None),  # "VPP 4", NeMo's "VP 8" column (case-sensitive abbreviations)
    (r"--expert-model-parallel-size[=\s]+(\d+)", "ep", None),
    (r"\bEP[\s=:]*(\d+)\b", "ep", None),  # "EP64", "EP 8" (case-sensitive: the usual abbreviation)
    (r"--expert-tensor-parallel-size[=\s]+(\d+)", "etp", None),
    (r"--zero-stage[=\s]+([0-3])\b", "zero", None),
    # Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer): Adam moments and master weights
    # in the stated dtypes (profile fields)
    (r"--exp-avg-dtype[=\s]+(fp32|bf16|fp16|fp8)\b", "exp_avg_dtype", None),
    (r"--exp-avg-sq-dtype[=\s]+(fp32|bf16|fp16|fp8)\b", "exp_avg_sq_dtype", None),
    (r"--main-params-dtype[=\s]+(fp32|bf16|fp16)\b", "main_params_dtype", None),
    # the virtual stages' layers in Megatron's syntax ('Et|(tt|)*30L'; quotes optional)
    (r"--pipeline-model-parallel-layout[=\s]+['\"]?([EtmL0-9|()*]+)", "pipeline_layout", None),
    # Megatron-Core's fully sharded data parallelism (NeMo / Megatron-Bridge tables: "FSDP = 1")
    (r"(?i)megatron[-_ ]?fsdp|--use-megatron-fsdp\b|--use-custom-fsdp\b|--use-torch-fsdp2\b|\bfsdp\s*[=:]\s*1\b",
     "zero", 3),
    (r"(?i)\bzero[\s_-]*(?:stage[\s_-]*)?([0-3])\b", "zero", None),  # "ZeRO-3", "ZeRO stage 2"
    # activation checkpointing in words (Hugging Face gradient_checkpointing, torchtitan's selective / full AC)
    (r"(?i:selective[\s_-]+(?:activation[\s_-]+)?(?:checkpointing|recomput\w*|ac)\b)" + _NOT_OFF, "recompute",
     "selective"),
    (r"(?i:(?:gradient|activation)[\s_-]*checkpointing|\bfull[\s_-]+ac\b)" + _NOT_OFF, "recompute", "full"),
    # the stack's compilation: torch.compile (torchtitan --compile / compile.enable), CUDA graphs (Megatron / NeMo)
    (r"(?i:torch[\s._-]*compile|--compile\b|compile\.enable|--training\.compile)", "torch_compile", True),
    (r"--enable-cuda-graph\b|--external-cuda-graph\b|(?i:cuda[\s_-]*graphs?\b)", "cuda_graphs", True),
    # FSDP's hybrid sharding (HYBRID_SHARD, HSDP): states sharded inside a node, replicated across nodes
    (r"(?i:\bhsdp\b|hybrid[\s_-]*shard\w*)", "sharding_strategy", "hybrid"),
    # CPU optimizer offloading: Megatron-Core's flags, DeepSpeed's offload_optimizer / ZeRO-Offload / CPU-Adam
    (r"(?s)(?=.*--optimizer-cpu-offload\b).*?--optimizer-offload-fraction[=\s]+([0-9]*\.?[0-9]+)",
     "optimizer_offload", None),
    (r"--optimizer-cpu-offload\b", "optimizer_offload", 1.0),
    (_OPTIMIZER_OFFLOAD, "optimizer_offload", 1.0),
    (_PARAM_OFFLOAD, "param_offload", True),
    # the stage an offloading run needs when none is named: parameter offloading offloads the ZeRO-3 shards;
    # Megatron's flag needs the distributed optimizer (in words: trainsim.validation.fitting.offload_settings)
    (_PARAM_OFFLOAD, "zero", 3),
    (r"--optimizer-cpu-offload\b", "zero", 1),
)


def notes_flag_names() -> list[str]:
    """The Megatron arguments :func:`notes_flags` reads, in table order."""
    names = [m.group(0) for p, _k, _v in NOTES_FLAGS for m in re.finditer(r"--[a-z0-9.-]+[a-z0-9]",
                                                                         p.replace("\\.", "."))]
    return list(dict.fromkeys(names))


#: Words before a setting, in its clause, that switch it off ("no FlashAttention", "without activation
#: checkpointing", "cannot use flash-attn 2").
_NEGATED_BEFORE = re.compile(r"(?i)(?:\b(?:no|not|without|w/o|disabled?|cannot|can't|does not|doesn't|never)\b|\bnon)"
                             r"[\s-]*(?:(?:use|run|with|the|any|enable)\w*[\s-]+){0,2}$")
#: Words after a setting that leave it unknown or off ("activation checkpointing not stated", "... disabled").
_UNSTATED_AFTER = re.compile(r"(?i)^\s*(?:is\s+|was\s+)?(?:not\s+(?:stated|given|known|specified|used|enabled)|unknown"
                             r"|unstated|unspecified|n/a\b|disabled|off\b)")
#: Clause delimiters: a negation reaches the end of its clause, no further.
_CLAUSE = re.compile(r"[.;,()\n]")
#: What a setting stated as off means, where it has an off value (the rest are simply not set).
_OFF_VALUE: dict[str, Any] = {"recompute": "none"}


def _negation(notes: str, found: re.Match[str]) -> str | None:
    """``"off"`` when the match's clause switches it off, ``"unknown"`` when it says the setting is not stated,
    else ``None``."""
    before = _CLAUSE.split(notes[:found.start()])[-1]
    after = _CLAUSE.split(notes[found.end():])[0]
    if _UNSTATED_AFTER.search(after):
        return "unknown"
    if _NEGATED_BEFORE.search(before[-40:]):
        return "off"
    return None


@dataclass(frozen=True)
class SourceConvention:
    """A setting a named source's own documentation gives for all of its runs: when ``pattern`` (case-insensitive)
    occurs in a row's source text and the row states no ``key``, the run used ``value`` (``why`` cites it)."""

    label: str
    pattern: str
    key: str
    value: Any
    why: str


#: How a named source configured every run it published, by its own documentation (read from the source text only).
_VTRAIN = r"\bvtrain\b"
_VTRAIN_CONFIG = "VIA-Research/vTrain config/validation/{single,multi}/*.json and src/config.py"
_VTRAIN_NETWORK = f"inter_node_bandwidth: 800 Gb/s in total per node ({_VTRAIN_CONFIG}): four 200 Gb/s HDR ports"
SOURCE_CONVENTIONS: tuple[SourceConvention, ...] = (
    SourceConvention("vTrain", _VTRAIN, "recompute", "full",
                     f"every validation config sets use_checkpoint: true ({_VTRAIN_CONFIG})"),
    SourceConvention("vTrain", _VTRAIN, "gpus_per_node", 8, f"node_size: 8 ({_VTRAIN_CONFIG})"),
    SourceConvention("vTrain", _VTRAIN, "nic_per_node", 4, _VTRAIN_NETWORK),
    SourceConvention("vTrain", _VTRAIN, "nic_gbps", 200, _VTRAIN_NETWORK),
    SourceConvention("vTrain", _VTRAIN, "vocab", 50257, f"vocab_size: 50257, GPT-2's tokenizer ({_VTRAIN_CONFIG})"),
)


def source_conventions(source: str) -> list[SourceConvention]:
    """The :data:`SOURCE_CONVENTIONS` of a row's source text."""
    return [c for c in SOURCE_CONVENTIONS if re.search(c.pattern, source, re.IGNORECASE)]


def notes_flags(notes: str) -> dict[str, Any]:
    """Settings stated as Megatron arguments in the notes (first mention of each setting wins). A mention negated
    in its clause ("no FlashAttention", "activation checkpointing not stated") sets nothing, except that a setting
    switched off says so where it has an off value (recompute: none)."""
    out: dict[str, Any] = {}
    for pattern, key, value in NOTES_FLAGS:
        if key in out:
            continue
        for found in re.finditer(pattern, notes):
            negation = _negation(notes, found)
            if negation is None:
                out[key] = value if value is not None else next(g for g in found.groups() if g is not None)
                break
            if negation == "off" and key in _OFF_VALUE:
                out[key] = _OFF_VALUE[key]
                break
    for key in ("micro_batch", "zero", "ep", "etp", "vpp", "layers_per_virtual_stage"):
        if key in out:
            out[key] = int(out[key])
    if "optimizer_offload" in out:
        out["optimizer_offload"] = min(1.0, float(out["optimizer_offload"]))
    return out



def stated_vpp(stated: dict[str, Any], layers: int, pp: int) -> int | None:
    """Virtual pipeline stages per rank stated in the notes (:func:`notes_flags`) of a pipelined row: directly, or as
    Megatron's layers per virtual stage; ``None`` without pipelining, when the notes name none or the layers do not
    divide."""
    if pp < 2:
        return None
    if "vpp" in stated:
        return int(stated["vpp"])
    per_chunk = stated.get("layers_per_virtual_stage")
    return vpp_from_layers_per_chunk(layers, pp, per_chunk) if per_chunk else None


# ---- GPUs ---------------------------------------------------------------------------------------------------------
#: normalised GPU model (:func:`trainsim.cost.tables.gpu_key`) -> system preset
SYSTEM_FOR_GPU_KEY: dict[str, str] = {
    "a100": "dgx-a100", "h100": "dgx-h100", "h200": "hgx-h200", "b200": "dgx-b200", "b300": "dgx-b300",
    "gb200": "nvl72-gb200", "gb300": "nvl72-gb300", "h800": "hgx-h800", "a800": "hgx-a800", "v100": "dgx2-v100",
}
#: Parts of a known GPU with their own preset, recognised by words of the gpu cell: (gpu key, pattern, preset).
#: An H100 with 95/96 GB of HBM2e at a 500 W limit is Meta's Grand Teton part (torchtitan's benchmarks).
GPU_VARIANTS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("h100", re.compile(r"hbm2e|grand\s*teton|\b9[56]\s*gb|\b500\s*w\b", re.IGNORECASE), "grand-teton-h100"),
)
#: A100 40GB SXM4 (A100 datasheet): 40 GiB HBM2 at 1555 GB/s; the rest as the 80GB part.
A100_40GB = {"name": "A100-SXM4-40GB", "hbm_capacity": 40 * 2**30, "hbm_bandwidth": 1555e9}
#: GPUs of a rack-scale NVLink domain per compute tray (GB200/GB300 NVL72: 4 GPUs and 2 Grace CPUs per tray).
NVL_TRAY_GPUS = 4


def system_for_gpu(name: str) -> tuple[str, dict[str, Any]] | None:
    """System preset and GPU-field overrides for a GPU name; ``None`` when no preset describes it."""
    from trainsim.cost.tables import gpu_key

    key = gpu_key(name)
    variant = next((p for k, pattern, p in GPU_VARIANTS if k == key and pattern.search(name)), None)
    if variant is not None:
        return variant, {}
    preset = SYSTEM_FOR_GPU_KEY.get(key)
    if preset is None:
        return None
    if preset == "dgx-a100" and re.search(r"40\s*gb", name, re.IGNORECASE):
        return preset, dict(A100_40GB)
    return preset, {}


# ---- model families -----------------------------------------------------------------------------------------------
_LLAMA_LIKE: dict[str, Any] = {
    "swiglu": True, "normalization": "RMSNorm", "position_embedding_type": "rope",
    "untie_embeddings_and_output_weights": True, "add_bias_linear": False, "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}


@dataclass(frozen=True)
class Family:
    """A model family: name pattern (regex on the lower-cased name), architecture fields, default vocabulary."""

    name: str
    pattern: str
    fields: dict[str, Any] = field(default_factory=dict)
    vocab: int | None = None
    gated_ffn: bool = False  # an empty ffn cell is Megatron's SwiGLU default (2/3·4h), else 4h


#: Ordered: first match wins; ``gpt`` matches everything (GELU 4h MLP with biases, learned positions, tied).
FAMILIES: tuple[Family, ...] = (
    Family("nemotron", r"nemotron", {"swiglu": False, "activation": "squared_relu", "position_embedding_type": "rope",
                                     "untie_embeddings_and_output_weights": True, "add_bias_linear": False,
                                     "hidden_dropout": 0.0, "attention_dropout": 0.0}, vocab=256000),
    Family("llama3", r"llama[\s_.-]*3(?!\d)", _LLAMA_LIKE, vocab=128256, gated_ffn=True),
    Family("llama", r"llama", _LLAMA_LIKE, vocab=32000, gated_ffn=True),
    Family("mistral", r"mistral|mixtral", _LLAMA_LIKE, vocab=32000, gated_ffn=True),
    Family("qwen2", r"qwen[\s_.-]*2", {**_LLAMA_LIKE, "add_qkv_bias": True}, vocab=151936, gated_ffn=True),
    Family("qwen3", r"qwen[\s_.-]*3", {**_LLAMA_LIKE, "qk_layernorm": True}, vocab=151936, gated_ffn=True),
    # Baichuan 2 (arXiv 2309.10305 §2.3-2.4): SwiGLU, RMSNorm, vocabulary 125,696; RoPE at 7B, ALiBi at 13B
    Family("baichuan-13b", r"baichuan[\w\s.-]*?13\s*b", {**_LLAMA_LIKE, "position_embedding_type": "alibi"},
           vocab=125696, gated_ffn=True),
    Family("baichuan", r"baichuan", _LLAMA_LIKE, vocab=125696, gated_ffn=True),
    Family("bloom", r"bloom", {"position_embedding_type": "alibi", "hidden_dropout": 0.0,
                               "attention_dropout": 0.0}, vocab=250880),
    # MosaicML MPT (llm-foundry mpt configs: no_bias, alibi, no learned positions, LayerNorm, no dropout; the
    # GPT-NeoX tokenizer's 50,277 tokens padded to 50,368)
    Family("mpt", r"\bmpt\b", {"position_embedding_type": "alibi", "add_bias_linear": False, "hidden_dropout": 0.0,
                             "attention_dropout": 0.0}, vocab=50368),
    Family("gpt", r"", {}, vocab=50257),
)
#: Frameworks whose GPT models train without dropout (Megatron-Core / NeMo GPT configs: hidden_dropout 0).
NO_DROPOUT_GPT_FRAMEWORKS = frozenset({"megatron-core", "nemo"})
#: Names of mixture-of-experts models: the schema has no expert columns, so only a preset of the same shape can say.
MOE_NAME = re.compile(r"mixtral|\bmoe\b|deepseek[\s_-]*v[23]|\ba\d+b\b|llama[\s_-]*4|gpt[\s_-]*oss|grok|kimi|"
                      r"\d+x\d+b", re.IGNORECASE)


#: Names of models with state-space or recurrent layers (Mamba hybrids such as Nemotron-H, Jamba, Zamba; RWKV, xLSTM,
#: Griffin): trainsim models transformer blocks only, so such a row is reported, not predicted as a transformer.
NON_TRANSFORMER_NAME = re.compile(r"nemotron[\s_-]*h\b|mamba|jamba|zamba|rwkv|xlstm|hyena|griffin|recurrent[\s_-]*gemma"
                                  r"|\bhybrid\b|\bssm\b", re.IGNORECASE)


#: The architecture of a model whose name names no family but whose shape is a gated-MLP / grouped-query one.
LLAMA_LIKE = Family("llama-like", r"", _LLAMA_LIKE, vocab=32000, gated_ffn=True)
#: FFN-to-hidden ratios below this are gated MLPs' (SwiGLU: 8/3 to 3.6 in Llama 2/3, Mistral, Qwen); GPT's is 4.
GATED_FFN_RATIO = 3.75


def family_of(name: str) -> Family:
    """The first family whose pattern occurs in the (lower-cased) model name."""
    lower = name.lower()
    return next(f for f in FAMILIES if re.search(f.pattern, lower))


def family_of_shape(name: str, hidden: int, heads: int, ffn: int | None, kv: int | None) -> tuple[Family, str | None]:
    """:func:`family_of`, except that a name matching no family (the GPT fallback) whose shape says gated MLP
    (``ffn / hidden`` below :data:`GATED_FFN_RATIO`) or grouped-query attention (``kv < heads``) is Llama-like
    (SwiGLU, RMSNorm, RoPE, no biases) rather than GPT; the second value says why, for the row's assumptions."""
    fam = family_of(name)
    if fam.pattern:
        return fam, None
    if ffn is not None and ffn < GATED_FFN_RATIO * hidden:
        return LLAMA_LIKE, f"ffn/h = {ffn / hidden:.2f} is a gated MLP's (GPT's is 4)"
    if kv is not None and kv < heads:
        return LLAMA_LIKE, f"grouped-query attention ({kv} KV heads of {heads})"
    return fam, None
