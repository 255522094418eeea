"""Megatron-LM command lines as they are: ``trainsim predict --megatron-args FILE``.

:func:`parse_megatron_args` maps the Megatron-LM training flags that change time, memory or cost onto a job: every
flag of :data:`trainsim.cli.job_options.JOB_OPTIONS` (generated from the spec fields' flag metadata, so a flag
declared on a field is understood here too: ``--disable-bias-linear``, ``--hidden-dropout``, ``--ddp-bucket-size``
...) plus the Megatron spellings with a rule of their own in :data:`EXTRA_FLAGS` (``--group-query-attention``,
``--fp8-format``, ``--recompute-method``, ``--num-layers-per-virtual-pipeline-stage``, ``--use-flash-attn``,
``--train-iters`` ...). Flags that do not affect performance (learning rate, data paths, logging, checkpointing:
:data:`IGNORED_FLAGS`, :data:`IGNORED_PREFIXES`) are ignored with one note; flags trainsim does not know are listed
in a second note so nothing is dropped silently.

:func:`read_launch_script` reads a launch script as bash would (:mod:`trainsim.cli.shell_script`: variables, arrays,
defaults, conditionals, here-documents) and returns the arguments of its ``torchrun ... pretrain_gpt.py ARGS`` line
(or ``python -m torch.distributed.run``, ``deepspeed``, ``srun python``), whose launcher gives the GPU count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.cli.shell_script import read_script
from trainsim.errors import TrainsimError
from trainsim.spec.pipeline_split import vpp_from_layers_per_chunk


@dataclass
class MegatronArgs:
    """The job described by a Megatron command line."""

    options: dict[str, Any] = field(default_factory=dict)  # job-option name → value (trainsim.cli.job_options)
    model: dict[str, Any] = field(default_factory=dict)  # Model fields without a job option
    training: dict[str, Any] = field(default_factory=dict)  # Training fields without a job option
    layers_per_virtual_stage: int | None = None
    recompute_method: str | None = None
    train_iters: int | None = None
    train_samples: int | None = None
    deepspeed_config: str | None = None  # --deepspeed_config FILE (Megatron-DeepSpeed)
    ignored: list[str] = field(default_factory=list)  # known not to affect performance
    unrecognised: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def all_notes(self) -> list[str]:
        """Notes to print: what was approximated, ignored and not recognised."""
        out = list(self.notes)
        if self.ignored:
            out.append(f"ignored {len(self.ignored)} flag(s) that do not affect performance: "
                       + " ".join(sorted(set(self.ignored))))
        if self.unrecognised:
            out.append("not recognised, ignored (check they do not affect performance): "
                       + " ".join(sorted(set(self.unrecognised))))
        return out


# ---- flags ------------------------------------------------------------------------------------------------------
Handler = Callable[[MegatronArgs, str | None], None]


def _fp8_format(a: MegatronArgs, v: str | None) -> None:
    a.options["fp8"] = True
    a.options["bf16"] = False  # Megatron: --fp8-format runs FP8 GEMMs on top of --bf16


def _recompute_method(a: MegatronArgs, v: str | None) -> None:
    if v not in ("uniform", "block"):
        raise TrainsimError("--recompute-method", f"unknown method {v!r}", "use uniform or block")
    a.recompute_method = v


def _checkpoint_activations(a: MegatronArgs, v: str | None) -> None:
    """Megatron-LM 2021-22: ``--checkpoint-activations`` or ``--activations-checkpoint-method uniform|block`` turn on
    full-layer checkpointing (renamed ``--recompute-granularity full --recompute-method`` in 2022)."""
    a.options["recompute_granularity"] = "full"
    if v is not None:
        _recompute_method(a, v)


#: Megatron's --recompute-modules (nargs='*'): core_attn is selective recomputation; the modules trainsim models are
#: kept; names it does not know are listed in a note.
MODELLED_RECOMPUTE_MODULES = ("mla_up_proj", "moe_act", "layernorm", "mlp", "moe", "shared_experts")


def _recompute_modules(a: MegatronArgs, values: list[str]) -> None:
    names = [n for v in values for n in v.replace(",", " ").split()]
    if "core_attn" in names and "recompute_granularity" not in a.options:
        a.options["recompute_granularity"] = "selective"
    kept = [n for n in names if n in MODELLED_RECOMPUTE_MODULES]
    if kept:
        a.options["recompute_modules"] = ",".join(kept)
    other = [n for n in names if n not in (*MODELLED_RECOMPUTE_MODULES, "core_attn")]
    if other:
        a.notes.append(f"--recompute-modules {' '.join(other)}: not modelled (core_attn and "
                       f"{', '.join(MODELLED_RECOMPUTE_MODULES)} are)")


#: Megatron-FSDP / torch FSDP2 inside Megatron-LM: --data-parallel-sharding-strategy → ZeRO stage.
FSDP_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _flash_attn(kernel: str) -> Handler:
    """Megatron-DeepSpeed's ``--use-flash-attn-v1`` / ``--use-flash-attn-triton`` (FlashAttention-1 and its Triton
    port, ``fa1``) and ``--use-flash-attn-v2`` (``fa2``): that kernel in CoreAttention."""
    def handler(a: MegatronArgs, v: str | None) -> None:
        a.options["attention"] = "flash"
        a.options["flash_kernel"] = kernel
    return handler


def _ds_sequence_parallel(a: MegatronArgs, v: str | None) -> None:
    """Megatron-DeepSpeed's ``--ds-sequence-parallel-size``: DeepSpeed-Ulysses, context parallelism by all-to-all."""
    a.options["cp"] = _int_value("--ds-sequence-parallel-size", v)
    a.options["cp_comm_type"] = "a2a"


def _fsdp(a: MegatronArgs, v: str | None) -> None:
    a.options.setdefault("zero_stage", 3)  # fully sharded unless --data-parallel-sharding-strategy says otherwise


def _sharding_strategy(a: MegatronArgs, v: str | None) -> None:
    if v not in FSDP_SHARDING:
        raise TrainsimError("--data-parallel-sharding-strategy", f"unknown strategy {v!r}",
                            f"use {', '.join(FSDP_SHARDING)}")
    a.options["zero_stage"] = FSDP_SHARDING[v]


def _int_value(flag: str, v: str | None) -> int:
    try:
        return int(str(v))
    except ValueError:
        raise TrainsimError(flag, f"expects an integer (got {v!r})", _undefined_hint(v)) from None


def _float_value(flag: str, v: str | None) -> float:
    try:
        return float(str(v))
    except ValueError:
        raise TrainsimError(flag, f"expects a number (got {v!r})", _undefined_hint(v)) from None


def _undefined_hint(v: str | None) -> str:
    if v and "$" in v:
        return "the script uses a variable it does not define: define it in the script or give the flag to trainsim"
    return "fix the value"


def _vpp_layers(a: MegatronArgs, v: str | None) -> None:
    a.layers_per_virtual_stage = _int_value("--num-layers-per-virtual-pipeline-stage", v)


def _train_iters(a: MegatronArgs, v: str | None) -> None:
    a.train_iters = _int_value("--train-iters", v)


def _train_samples(a: MegatronArgs, v: str | None) -> None:
    a.train_samples = _int_value("--train-samples", v)


def _note(text: str) -> Handler:
    def h(a: MegatronArgs, v: str | None) -> None:
        a.notes.append(text)
    return h


#: Vocabulary of a tokenizer when the command line gives no --vocab-size (Megatron reads it from the tokenizer):
#: GPT2BPETokenizer is the GPT-2 BPE (gpt2-vocab.json, 50,257 tokens; pretrain_gpt.py's default tokenizer type when
#: --vocab-file/--merge-file are given), Llama2Tokenizer the Llama 2 SentencePiece model (32,000),
#: BertWordPieceLowerCase / BertWordPieceCase BERT's uncased / cased WordPiece vocabularies (30,522 / 28,996); a HF
#: --tokenizer-model is matched by name (Llama 3: 128,256 as its config.json; Llama 2: 32,000; GPT-2: 50,257).
TOKENIZER_VOCAB: tuple[tuple[str, int], ...] = (
    (r"^gpt2bpetokenizer$", 50257), (r"^llama2tokenizer$", 32000),
    (r"^bertwordpiecelowercase$", 30522), (r"^bertwordpiececase$", 28996),
    (r"llama[-_ ]?3", 128256), (r"llama[-_ ]?2", 32000), (r"(^|/)gpt2$", 50257),
    (r"deepseek[-_ ]?v[23]|deepseek[-_ ]?r1", 129280), (r"qwen[-_ ]?(?:2|3)", 151936),
)


def _set_int(option: str, flag: str) -> Handler:
    """A handler setting the job option ``option`` to the flag's integer value (an older or other spelling)."""
    def h(a: MegatronArgs, v: str | None) -> None:
        a.options[option] = _int_value(flag, v)
    return h


def _tokenizer(key: str) -> Handler:
    def h(a: MegatronArgs, v: str | None) -> None:
        a.training[key] = v if v is not None else True
    return h


def _kv_heads(a: MegatronArgs, v: str | None) -> None:
    a.options["num_query_groups"] = _int_value("--num-key-value-heads", v)
    a.training["_gqa"] = True  # Megatron-DeepSpeed: grouped-query attention whenever fewer key/value heads


def _pp_partition(a: MegatronArgs, v: str | None) -> None:
    """Megatron-DeepSpeed's ``--pp-partition-method``: ``type:transformer|embedding`` (BLOOM) weighs the embedding
    and the tied output layer as one transformer layer each, like Megatron-Core's account-for-embedding/loss split;
    the other methods (``type:transformer``, ``parameters``) are the profile's split."""
    method = str(v).strip("'\"").replace(" ", "")
    if method in ("type:transformer|embedding", "type:embedding|transformer"):
        a.options["account_for_embedding_in_pipeline_split"] = True
        a.options["account_for_loss_in_pipeline_split"] = True
    elif method not in ("type:transformer", "parameters", "uniform"):
        a.notes.append(f"--pp-partition-method {method}: the profile's layer split is modelled")


def _fp4(a: MegatronArgs, v: str | None) -> None:
    """Megatron-Core's ``--fp4-format e2m1`` / ``--fp4-recipe nvfp4``: Transformer Engine's NVFP4 recipe (FP4 GEMMs,
    trainsim's ``--fp8-recipe nvfp4``); another FP4 recipe is named in a note and priced as NVFP4."""
    _fp8_format(a, v)
    a.options["fp8_recipe"] = "nvfp4"
    if v is not None and v.lower() not in ("e2m1", "nvfp4"):
        a.notes.append(f"FP4 {v}: modelled as the NVFP4 recipe")


def _dispatcher(a: MegatronArgs, v: str | None) -> None:
    """``--moe-token-dispatcher-type``: flex (DeepEP / HybridEP) deduplicates a token's network copies; the others
    are modelled as the all-to-all (allgather, Megatron's default, with a note)."""
    if v in ("flex", "alltoall"):
        a.options["moe_token_dispatcher"] = v
        return
    if v != "alltoall_seq":
        a.notes.append(f"--moe-token-dispatcher-type {v}: tokens are modelled moving by all-to-all over the "
                       "expert-parallel group")


def _grouped_gemm(a: MegatronArgs, v: str | None) -> None:
    """``--moe-grouped-gemm`` (and its legacy kernel): the local experts in grouped GEMMs launched from C++."""
    a.options["moe_expert_launch"] = "cpp_loop"


def _fp8_over_bf16(options: dict[str, Any]) -> None:
    """Megatron's ``--bf16`` with ``--fp8-format`` is FP8 training with bf16 parameters: the precision is fp8."""
    if options.get("fp8") and options.get("bf16"):
        options["bf16"] = False


def _cuda_graph_impl(a: MegatronArgs, v: str | None) -> None:
    """``--cuda-graph-impl local|transformer_engine`` (Megatron-Core's successor of ``--enable-cuda-graph`` /
    ``--external-cuda-graph``) captures CUDA graphs; ``none`` does not."""
    a.options["enable_cuda_graph"] = str(v).lower() != "none"


#: Megatron flags beyond the job options (spellings with a rule of their own: the job options themselves come from
#: the spec fields' flags): flag → (takes a value, handler).
EXTRA_FLAGS: dict[str, tuple[bool, Handler]] = {
    "--group-query-attention": (False, lambda a, v: a.training.__setitem__("_gqa", True)),
    "--fp8-format": (True, _fp8_format),
    "--fp4-format": (True, _fp4),
    "--fp4-recipe": (True, _fp4),
    "--fp8-hybrid": (False, _fp8_format),
    "--recompute-method": (True, _recompute_method),
    "--recompute-activations": (False, lambda a, v: a.options.__setitem__("recompute_granularity", "selective")),
    "--num-layers-per-virtual-pipeline-stage": (True, _vpp_layers),
    "--use-flash-attn": (False, lambda a, v: a.options.__setitem__("attention", "flash")),
    "--use-flash-attn-v2": (False, _flash_attn("fa2")),
    "--use-flash-attn-v1": (False, _flash_attn("fa1")),
    "--use-flash-attn-triton": (False, _flash_attn("fa1")),
    "--ds-sequence-parallel-size": (True, _ds_sequence_parallel),
    "--train-iters": (True, _train_iters),
    "--train-samples": (True, _train_samples),
    "--rampup-batch-size": (True, _note("--rampup-batch-size ignored: the prediction is for the full global batch")),
    # Megatron-Core flags with an effect trainsim models otherwise or not at all: named in a note
    "--moe-router-dtype": (True, _note("--moe-router-dtype: the router's precision is not modelled (a small GEMM)")),
    "--moe-permute-fusion": (False, _note("--moe-permute-fusion: the token permutation is modelled as one fused "
                                          "copy either way")),
    "--moe-router-fusion": (False, _note("--moe-router-fusion: the router's elementwise kernels are not modelled "
                                         "one by one")),
    "--moe-use-legacy-grouped-gemm": (False, _grouped_gemm),
    "--main-grads-dtype": (True, _note("--main-grads-dtype: gradients accumulate in the profile's dtype (fp32 for "
                                       "Megatron-Core); bf16 main gradients are not modelled")),
    "--overlap-p2p-communication": (False, lambda a, v: None),  # Megatron's default for interleaved schedules
    "--tp-comm-overlap-cfg": (True, lambda a, v: None),  # userbuffer tuning of --tp-comm-overlap
    "--reuse-grad-buf-for-mxfp8-param-ag": (False, _note("--reuse-grad-buf-for-mxfp8-param-ag: the MXFP8 parameter "
                                                         "all-gather buffer is counted separately (memory "
                                                         "overestimated by it)")),
    "--moe-hybridep-num-sms": (True, lambda a, v: None),
    "--first-k-dense-replace": (True, _set_int("moe_first_k_dense", "--first-k-dense-replace")),  # MindSpeed
    "--extra-vocab-size": (True, lambda a, v: a.training.__setitem__("_extra_vocab",
                                                                     _int_value("--extra-vocab-size", v))),
    "--cuda-graph-impl": (True, _cuda_graph_impl),
    "--cuda-graph-scope": (True, _note("--cuda-graph-scope: partial CUDA graphs are modelled as graphs of whole "
                                       "layers (the host time of the operators outside the scope is not counted)")),
    "--moe-grouped-gemm": (False, _grouped_gemm),
    "--use-torch-fsdp2": (False, _fsdp),
    "--use-custom-fsdp": (False, _fsdp),
    "--use-megatron-fsdp": (False, _fsdp),
    "--data-parallel-sharding-strategy": (True, _sharding_strategy),
    "--checkpoint-activations": (False, _checkpoint_activations),
    "--activations-checkpoint-method": (True, _checkpoint_activations),
    "--activations-checkpoint-num-layers": (True, _set_int("recompute_num_layers",
                                                           "--activations-checkpoint-num-layers")),
    "--checkpoint-num-layers": (True, _set_int("recompute_num_layers", "--checkpoint-num-layers")),
    # Megatron-DeepSpeed (BLOOM, MT-NLG): --deepspeed runs the DeepSpeed engine (its pipeline engine, ZeRO from
    # --zero-stage); --deepspeed_config and the activation-checkpointing switches belong to it
    "--deepspeed": (False, lambda a, v: a.options.__setitem__("framework", "megatron-deepspeed")),
    "--deepspeed_config": (True, lambda a, v: setattr(a, "deepspeed_config", v)),
    "--deepspeed-config": (True, lambda a, v: setattr(a, "deepspeed_config", v)),
    "--deepspeed-activation-checkpointing": (False, lambda a, v: None),
    # Megatron-DeepSpeed (BLOOM): the padded vocabulary, stated
    "--pad-vocab-size-to": (True, _set_int("vocab_size", "--pad-vocab-size-to")),
    # Megatron-DeepSpeed spellings (examples_deepspeed/): GQA by key/value heads, RoPE by a switch, DeepSpeed-MoE
    "--num-key-value-heads": (True, _kv_heads),
    "--use-rotary-position-embeddings": (False, lambda a, v: a.options.__setitem__("position_embedding_type", "rope")),
    "--no-position-embedding": (False, lambda a, v: a.training.__setitem__("_no_position_embedding", True)),
    "--topk": (True, _set_int("moe_router_topk", "--topk")),
    "--expert-interval": (True, _set_int("moe_layer_freq", "--expert-interval")),
    "--moe-expert-parallel-size": (True, _set_int("ep", "--moe-expert-parallel-size")),
    "--moe-train-capacity-factor": (True, lambda a, v: a.options.__setitem__(
        "moe_expert_capacity_factor", _float_value("--moe-train-capacity-factor", v))),
    "--disable-moe-token-dropping": (False, lambda a, v: a.training.__setitem__("_no_token_dropping", True)),
    "--moe-enable-deepep": (False, lambda a, v: a.options.__setitem__("moe_token_dispatcher", "flex")),
    "--moe-flex-dispatcher-backend": (True, lambda a, v: a.options.__setitem__("moe_token_dispatcher", "flex")),
    "--pp-partition-method": (True, _pp_partition),
    "--tokenizer-type": (True, _tokenizer("_tokenizer_type")),
    "--tokenizer-model": (True, _tokenizer("_tokenizer_model")),
    "--merge-file": (True, _tokenizer("_merge_file")),
}

#: trainsim options whose Megatron spelling the command line's own parser would refuse (aliased values, a pattern,
#: several values): on ``trainsim predict`` they go to the Megatron parser, as in a script.
CLI_MEGATRON_SPELLED = frozenset({"--attention-backend", "--normalization", "--position-embedding-type",
                                  "--moe-layer-freq", "--recompute-modules", "--num-experts"})

#: Values Megatron accepts that trainsim spells otherwise: flag → {value (lower case): trainsim's value, or None for
#: "the profile's default" (named in a note)}.
VALUE_ALIASES: dict[str, dict[str, str | None]] = {
    "--attention-backend": {"auto": None},  # Transformer Engine picks its fused / flash kernel
    "--normalization": {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"},  # Megatron-DeepSpeed spells them so
    "--position-embedding-type": {"learned": "learned_absolute"},
}


def _moe_layer_freq(a: MegatronArgs, v: str | None) -> None:
    """``--moe-layer-freq N`` or Megatron-Core's pattern ``([0]*K+[1]*N)`` (a Python list expression of 0/1 per
    layer): mapped onto first-k-dense, frequency and offset when the pattern has that form."""
    text = str(v).strip()
    if text.isdigit():
        a.options["moe_layer_freq"] = int(text)
        return
    pattern = layer_pattern(text)
    if pattern is None:
        raise TrainsimError("--moe-layer-freq", f"expects an integer or a list such as ([0]*3+[1]*29) (got {v!r})",
                            _undefined_hint(v))
    fit = pattern_as_frequency(pattern)
    if fit is None:
        raise TrainsimError("--moe-layer-freq", f"the pattern {text} is not 'the first K dense, then every N-th "
                            "layer'", "give --moe-layer-freq N --moe-first-k-dense K for the closest pattern")
    first_k, freq, offset = fit
    a.options.update(moe_layer_freq=freq, moe_first_k_dense=first_k, moe_layer_offset=offset)
    a.training["_moe_pattern_layers"] = len(pattern)


def layer_pattern(text: str) -> list[int] | None:
    """The 0/1 list of a Megatron layer-pattern expression (``[1]*4``, ``([0]+[1]*15)``, ``[0,1,1]``)."""
    def ev(node: ast.AST) -> list[int] | int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.List):
            items = [x for x in (ev(e) for e in node.elts) if isinstance(x, int) and x in (0, 1)]
            if len(items) != len(node.elts):
                raise ValueError(text)
            return items
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
                return left * right
            if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
                return right * left
        raise ValueError(text)

    try:
        out = ev(ast.parse(text.strip(), mode="eval"))
    except (ValueError, SyntaxError, RecursionError):
        return None
    return out if isinstance(out, list) and out else None


def pattern_as_frequency(pattern: list[int]) -> tuple[int, int, int] | None:
    """(first k dense, frequency, offset) such that layer i is MoE iff i >= k and i % frequency == offset."""
    first_k = next((k for k, x in enumerate(pattern) if x), len(pattern))
    for freq in range(1, len(pattern) + 1):
        offset = first_k % freq
        if all(bool(x) == (i >= first_k and i % freq == offset) for i, x in enumerate(pattern)):
            return first_k, freq, offset
    return None


#: Flags known not to change time, memory or cost (their value, if any, is skipped).
IGNORED_FLAGS = frozenset({
    "--weight-decay", "--clip-grad", "--split", "--vocab-file", "--mock-data", "--distributed-backend",
    "--distributed-timeout-minutes", "--dataloader-type", "--num-workers", "--use-mcore-models",
    "--rotary-base", "--rotary-percent", "--rotary-seq-len-interpolation-factor", "--rope-scaling-factor",
    "--use-rope-scaling", "--norm-epsilon", "--apply-query-key-layer-scaling",
    "--attention-softmax-in-fp32", "--hysteresis", "--initial-loss-scale", "--min-loss-scale",
    "--finetune", "--use-checkpoint-args", "--override-opt_param-scheduler", "--manual-gc", "--manual-gc-interval",
    "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-pre-softmax", "--timing-log-level",
    "--no-create-attention-mask-in-dataloader",
    "--use-cpu-initialization", "--min-lr", "--profile", "--profile-step-start", "--profile-step-end",
    "--profile-ranks", "--async-save", "--no-save-optim", "--no-save-rng", "--exit-signal-handler",
    "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin", "--fp8-interval", "--swiglu-fusion",
    "--num-dataset-builder-threads", "--object-storage-cache-path", "--legacy-tokenizer",
    "--apply-layernorm-1p", "--calculate-per-token-loss", "--decoupled-lr", "--decoupled-min-lr",
    "--no-mmap-bin-files", "--tiktoken-pattern", "--empty-unused-memory-level", "--embed-layernorm",
    "--sync-tp-duplicated-parameters", "--abort-on-unmet-fused-kernel-constraints", "--kill-switch-path",
    "--moe-eval-capacity-factor", "--moe-min-capacity", "--create-moe-param-group", "--moe-loss-coeff",
    "--optimizer", "--no-query-key-layer-scaling", "--attention-dropout-in-fp32",
    "--no-pipeline-parallel", "--moe-router-score-function", "--moe-router-topk-scaling-factor",
    "--moe-token-drop-policy", "--mscale", "--mscale-all-dim", "--no-persist-layer-norm", "--rotary-scaling-factor",
    "--eod-mask-loss", "--override-lr-scheduler", "--rotary-position-embeddings-theta", "--auto-detect-ckpt-format",
    "--no-check-for-nan-in-loss-and-grad", "--mtp-loss-scaling-factor", "--moe-router-bias-update-rate", "--dataset",
    "--train-mode", "--max-padding-length", "--te-rng-tracker", "--use-precision-aware-optimizer",
    "--cross-entropy-fusion-impl", "--moe-router-force-load-balancing",
})
IGNORED_PREFIXES = ("--lr", "--log-", "--log", "--wandb-", "--tensorboard", "--eval-", "--save", "--load",
                    "--train-weighted-split", "--valid-weighted-split", "--test-weighted-split",
                    "--data-", "--tokenizer-", "--adam-", "--sgd-", "--init-method", "--ckpt-", "--exit-",
                    "--no-load-", "--loss-scale", "--valid-", "--test-", "--train-data", "--seed", "--dist-ckpt",
                    "--pretrained-", "--use-dist-ckpt", "--retro-", "--bert-", "--t5-", "--vision-", "--ict-",
                    "--biencoder-", "--one-logger", "--straggler-", "--enable-one-logger", "--inprocess-",
                    "--rerun-", "--result-rejected", "--check-for-", "--error-injection", "--iter-per-epoch")


def is_ignored(flag: str) -> bool:
    """Whether a flag is known not to affect performance."""
    return flag in IGNORED_FLAGS or flag.startswith(IGNORED_PREFIXES)


def _job_flags() -> dict[str, Any]:
    from trainsim.cli.job_options import JOB_OPTIONS

    return {flag: opt for opt in JOB_OPTIONS for flag in opt.flags if flag.startswith("--")}


def _is_flag(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


def parse_megatron_args(tokens: list[str]) -> MegatronArgs:
    """Map Megatron-LM training arguments onto job options (see the module docstring)."""
    job_flags = _job_flags()
    out = MegatronArgs()
    i = 0

    def value(takes: bool, flag: str, inline: str | None) -> str | None:
        """The value of ``flag``: inline (``--flag=v``) or the next token, which it consumes."""
        nonlocal i
        if not takes:
            return None
        if inline is not None:
            return inline
        if i < len(tokens) and not _is_flag(tokens[i]):
            i += 1
            return tokens[i - 1]
        raise TrainsimError(flag, "expects a value", f"give {flag} VALUE")

    def rest(inline: str | None) -> list[str]:
        """The further values of the current flag, which it consumes (Megatron has no positional arguments: every
        token up to the next flag belongs to it, e.g. ``--data-path W1 P1``, ``--rampup-batch-size 16 16 N``)."""
        nonlocal i
        start = i
        while inline is None and i < len(tokens) and not _is_flag(tokens[i]):
            i += 1
        return tokens[start:i]

    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            out.unrecognised.append(token)
            continue
        flag, inline = token, None
        if "=" in token:
            flag, inline = token.split("=", 1)

        if flag == "--recompute-modules":  # nargs='*' in Megatron: every value up to the next flag
            _recompute_modules(out, [inline] if inline is not None else rest(inline))
            continue
        if flag == "--hierarchical-context-parallel-sizes":  # nargs='+' in Megatron
            sizes = " ".join([inline] if inline is not None else rest(inline)).replace(",", " ").split()
            out.options["hierarchical_cp_sizes"] = ",".join(str(_int_value(flag, v)) for v in sizes)
            continue
        if flag == "--moe-token-dispatcher-type":  # Megatron's allgather (its default) has no field value
            _dispatcher(out, value(True, flag, inline))
            continue
        if flag in ("--num-experts", "--moe-num-experts"):  # Megatron-DeepSpeed PR-MoE: one count per expert layer
            counts = {_int_value(flag, v) for v in ([inline] if inline is not None else rest(inline))}
            if len(counts) > 1:
                raise TrainsimError(flag, f"gives different expert counts per layer ({sorted(counts)}: "
                                    "Pyramid-Residual MoE), which trainsim does not model",
                                    "give one expert count for every MoE layer")
            if counts:
                out.options["num_experts"] = counts.pop()
            continue
        if flag == "--moe-layer-freq":
            _moe_layer_freq(out, value(True, flag, inline))
            continue
        opt = job_flags.get(flag)
        if opt is not None:
            if opt.section == "job" and opt.name in ("model", "system"):
                out.unrecognised.append(flag)
                value(True, flag, inline)
                continue
            if opt.kind is bool:
                out.options[opt.name] = True
                continue
            v = value(True, flag, inline)
            aliases = VALUE_ALIASES.get(flag, {})
            if v is not None and v.lower() in aliases:
                if aliases[v.lower()] is None:
                    out.notes.append(f"{flag} {v}: the profile's default")
                    continue
                v = aliases[v.lower()]
            if opt.kind is int:
                out.options[opt.name] = _int_value(flag, v)
            elif opt.kind is float:
                out.options[opt.name] = _float_value(flag, v)
            else:
                out.options[opt.name] = v
            continue
        if flag in EXTRA_FLAGS:
            takes, handler = EXTRA_FLAGS[flag]
            handler(out, value(takes, flag, inline))
            if takes:
                rest(inline)  # further values belong to it too
            continue
        rest(inline)  # not a flag trainsim models: skip its values
        if is_ignored(flag):
            out.ignored.append(flag)
        else:
            out.unrecognised.append(flag)
    _resolve(out)
    return out


def _resolve(a: MegatronArgs) -> None:
    """Megatron's rules between flags."""
    gqa = a.training.pop("_gqa", False)
    if "num_query_groups" in a.options and not gqa:
        a.notes.append("--num-query-groups without --group-query-attention is ignored by Megatron: multi-head "
                       "attention modelled")
        a.options.pop("num_query_groups")
    _fp8_over_bf16(a.options)
    extra_vocab = a.training.pop("_extra_vocab", 0)
    if extra_vocab and a.options.get("vocab_size"):  # Pai-Megatron-Patch / ROCm forks: tokens added to the vocab
        a.options["vocab_size"] = int(a.options["vocab_size"]) + extra_vocab
    elif extra_vocab:
        a.notes.append(f"--extra-vocab-size {extra_vocab}: added to no stated --vocab-size (give it)")
    if a.training.pop("_no_position_embedding", False) and "position_embedding_type" not in a.options:
        a.options["position_embedding_type"] = "none"
    no_drop = a.training.pop("_no_token_dropping", False)
    if no_drop:
        a.options.pop("moe_expert_capacity_factor", None)
    if a.options.get("framework") == "megatron-deepspeed" and int(a.options.get("num_experts") or 1) > 1:
        # DeepSpeed-MoE's defaults in Megatron-DeepSpeed's arguments.py: --topk 1, --expert-interval 2,
        # --moe-train-capacity-factor 1.0 (tokens beyond capacity dropped)
        a.options.setdefault("moe_router_topk", 1)
        a.options.setdefault("moe_layer_freq", 2)
        if not no_drop:
            a.options.setdefault("moe_expert_capacity_factor", 1.0)
    pattern_layers = a.training.pop("_moe_pattern_layers", None)
    layers = a.options.get("num_layers")
    if pattern_layers is not None and layers is not None and pattern_layers != layers:
        raise TrainsimError("--moe-layer-freq", f"the pattern has {pattern_layers} entries for {layers} layers",
                            "give one entry per layer")
    kind = a.training.pop("_tokenizer_type", None)
    name = a.training.pop("_tokenizer_model", None)
    merges = a.training.pop("_merge_file", None)
    if "vocab_size" not in a.options:
        vocab = tokenizer_vocab(kind, name, merges is not None)
        if vocab is not None:
            a.options["vocab_size"] = vocab
            source = kind or name or "GPT2BPETokenizer: --merge-file"
            a.notes.append(f"vocab size {vocab} from the tokenizer ({source})")


def tokenizer_vocab(kind: str | None, model: str | None, merge_file: bool) -> int | None:
    """Vocabulary size of a Megatron tokenizer (:data:`TOKENIZER_VOCAB`), ``None`` when not known."""
    if kind is None and merge_file:
        kind = "GPT2BPETokenizer"  # pretrain_gpt.py's args_defaults
    for text in (kind, model):
        if isinstance(text, str):
            hit = next((v for pattern, v in TOKENIZER_VOCAB if re.search(pattern, text.lower())), None)
            if hit is not None:
                return hit
    return None


def merge_into_options(given: dict[str, Any], a: MegatronArgs, gpus: int | None = None) -> dict[str, Any]:
    """Job options from the script, overridden by the flags given to trainsim (``None``/``False``: not given)."""
    from trainsim.cli.job_options import fill_unset

    if a.options.get("fp8") and given.get("bf16"):  # --bf16 given to trainsim beside a pasted --fp8-format: the
        given = {**given, "bf16": False}           # Megatron rule (_fp8_over_bf16), not "a given precision wins"
    out = fill_unset(given, a.options)
    if a.recompute_method == "uniform" and out.get("recompute_num_layers") is not None:
        a.notes.append("--recompute-method uniform recomputes every layer (in groups of --recompute-num-layers)")
        out["recompute_num_layers"] = None
    if gpus and out.get("num_gpus") is None:
        out["num_gpus"] = gpus
    return out


def apply_to_job(job: Any, a: MegatronArgs) -> Any:
    """The job with the Megatron settings that have no job option (model fields, vpp from layers per virtual stage,
    training tokens from --train-iters/--train-samples)."""
    model = job.model.replace(**a.model) if a.model else job.model
    training = job.training.replace(**a.training) if a.training else job.training
    par = job.parallelism
    if a.layers_per_virtual_stage:
        vpp = vpp_from_layers_per_chunk(model.num_layers, par.pp, a.layers_per_virtual_stage)
        if vpp is None:
            raise TrainsimError("--num-layers-per-virtual-pipeline-stage",
                                f"{a.layers_per_virtual_stage} does not divide the {model.num_layers // par.pp} "
                                "layers per pipeline rank", "choose a divisor of num_layers / pp")
        if vpp > 1:
            par = par.replace(vpp=vpp)
    seq = job.training.seq_length or model.seq_length
    if a.train_iters and not training.train_tokens:
        training = training.replace(train_tokens=float(a.train_iters) * training.global_batch_size * seq)
    elif a.train_samples and not training.train_tokens:
        training = training.replace(train_tokens=float(a.train_samples) * seq)
    if model is job.model and training is job.training and par is job.parallelism:
        return job
    return job.replace(model=model, training=training, parallelism=par)


#: Megatron entry points that train something else than a decoder-only language model: (what, modelled as) — None:
#: refused.
ENTRY_POINTS: dict[str, str | None] = {
    "pretrain_bert.py": "BERT, modelled as a bidirectional encoder with its masked-LM head as the output layer",
    "pretrain_t5.py": None, "pretrain_retro.py": None, "pretrain_mamba.py": None, "pretrain_ict.py": None,
    "pretrain_vlm.py": "a vision-language model: the language model alone is modelled (no vision encoder)",
    "pretrain_vision_classify.py": None, "pretrain_vision_dino.py": None, "pretrain_vision_inpaint.py": None,
}
PRECISION_OPTIONS = ("fp16", "bf16", "fp8", "fp32")


def check_entry_point(entry: str | None) -> None:
    """Refuse a launch script whose entry point trains a model trainsim does not model, before its flags are read."""
    if entry is not None and entry in ENTRY_POINTS and ENTRY_POINTS[entry] is None:
        raise TrainsimError("megatron_args", f"{entry} trains a model trainsim does not model (encoder-decoder, "
                            "retrieval, state-space or vision)", "predict a decoder-only language model")


def drop_given(tokens: list[str], given: dict[str, Any]) -> list[str]:
    """A script's arguments without the flags whose job option the command line gives (the flag and its values):
    flags given to trainsim win, even over a script value that could not be read (an undefined variable)."""
    flags = _job_flags()
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token.split("=", 1)[0]
        opt = flags.get(name) if _is_flag(token) else None
        if opt is not None and given.get(opt.name) not in (None, False):
            i += 1
            while "=" not in token and i < len(tokens) and not _is_flag(tokens[i]):
                i += 1  # its values
            continue
        out.append(token)
        i += 1
    return out


def apply_entry_point(a: MegatronArgs, entry: str | None) -> None:
    """What a launch script's entry point and its full command line imply: the model kind of ``pretrain_bert.py``
    (other non-GPT entry points are refused), fp32 training when no precision flag is given (Megatron's
    default; Megatron-DeepSpeed takes it from the DeepSpeed config), and Megatron-Core's experts one after another
    (SequentialMLP) when a mixture of experts runs without ``--moe-grouped-gemm``."""
    if entry is None:
        return
    check_entry_point(entry)
    if entry in ENTRY_POINTS:
        what = ENTRY_POINTS[entry]
        a.notes.append(f"{entry}: {what}")
        if entry == "pretrain_bert.py":
            a.options["bidirectional"] = True
            if "vocab_size" not in a.options:  # pretrain_bert.py's args_defaults: BertWordPieceLowerCase
                a.options["vocab_size"] = 30522
                a.notes.append("vocab size 30522 from pretrain_bert.py's default tokenizer (BertWordPieceLowerCase)")
    megatron_core = a.options.get("framework", "megatron-core") in ("megatron-core", "nemo")
    if megatron_core and a.options.get("num_experts") and "moe_expert_launch" not in a.options:
        a.options["moe_expert_launch"] = "python_loop"  # Megatron's default moe_grouped_gemm=False
        a.notes.append("no --moe-grouped-gemm: Megatron-Core runs the experts one after another (SequentialMLP)")
    if not any(a.options.get(k) for k in PRECISION_OPTIONS) and a.options.get("framework") != "megatron-deepspeed":
        a.options["fp32"] = True
        a.notes.append("no --bf16, --fp16 or --fp8-format: Megatron trains in fp32 (modelled with TF32 GEMMs)")


# ---- launch scripts ---------------------------------------------------------------------------------------------
def read_launch_script(path: str | Path) -> tuple[list[str], int | None]:
    """The Megatron arguments of a launch script (or a file of bare arguments) and the GPU count it launches
    (:func:`trainsim.cli.shell_script.read_script`, which also returns the script's notes and written files)."""
    cmd = read_script(path)
    return cmd.args, cmd.gpus
