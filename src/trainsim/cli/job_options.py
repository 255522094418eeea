"""The job flags shared by ``predict``, ``search`` and other commands (Megatron-LM names plus short aliases).

:func:`with_job_options` adds every flag of :data:`JOB_OPTIONS` to a Typer command; the command receives them as
``job_options: dict[str, Any]`` and turns them into a :class:`~trainsim.spec.job.Job` with :func:`job_from_options`.
With ``as_text=True`` every flag is a string, so that ``search`` can accept lists (``--tp 4,8,16``) and ranges.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from trainsim.errors import TrainsimError
from trainsim.schedule import schedule_help


@dataclass(frozen=True)
class JobOption:
    """One command-line flag and the spec field it sets."""

    name: str  # python parameter name
    flags: tuple[str, ...]
    kind: type  # int, float, str or bool
    section: str  # model | system | parallelism | training | job
    field: str  # field in that section
    help: str
    default: Any = None
    inverted: bool = False  # a flag that turns its field off (Megatron's --no-... style)


def _o(name: str, flags: tuple[str, ...], kind: type, section: str, field: str, help: str, default: Any = None,
       inverted: bool = False) -> JobOption:
    return JobOption(name, flags, kind, section, field, help, default, inverted)


JOB_OPTIONS: tuple[JobOption, ...] = (
    _o("model", ("--model", "-m"), str, "job", "model", "model preset, Hugging Face config.json, or model JSON"),
    _o("system", ("--system", "-s"), str, "job", "system", "system preset or YAML file", "dgx-h100"),
    _o("framework", ("--framework",), str, "job", "framework",
       "software stack: NAME[@version] preset (megatron-core, nemo, torchtitan, fsdp, hf-transformers, ...) or "
       "profile YAML", "megatron-core"),
    _o("num_gpus", ("--num-gpus", "-n"), int, "job", "num_gpus", "total GPUs (dp is derived from it)"),
    # model
    _o("num_layers", ("--num-layers",), int, "model", "num_layers", "transformer layers"),
    _o("hidden_size", ("--hidden-size",), int, "model", "hidden_size", "hidden size"),
    _o("num_attention_heads", ("--num-attention-heads",), int, "model", "num_attention_heads", "attention heads"),
    _o("num_query_groups", ("--num-query-groups",), int, "model", "num_query_groups", "key/value heads (GQA)"),
    _o("kv_channels", ("--kv-channels",), int, "model", "kv_channels", "head dimension"),
    _o("ffn_hidden_size", ("--ffn-hidden-size",), int, "model", "ffn_hidden_size", "FFN hidden size"),
    _o("vocab_size", ("--vocab-size",), int, "model", "vocab_size", "vocabulary size"),
    _o("max_position_embeddings", ("--max-position-embeddings",), int, "model", "seq_length",
       "model's maximum sequence length"),
    _o("swiglu", ("--swiglu",), bool, "model", "swiglu", "gated SwiGLU MLP"),
    _o("normalization", ("--normalization",), str, "model", "normalization", "LayerNorm or RMSNorm"),
    _o("untie", ("--untie-embeddings-and-output-weights",), bool, "model", "untie_embeddings_and_output_weights",
       "separate LM head"),
    _o("position_embedding_type", ("--position-embedding-type",), str, "model", "position_embedding_type",
       "learned_absolute, rope, alibi or none"),
    _o("num_experts", ("--num-experts",), int, "model", "num_experts", "MoE experts"),
    _o("moe_router_topk", ("--moe-router-topk",), int, "model", "moe_router_topk", "experts per token"),
    _o("moe_ffn_hidden_size", ("--moe-ffn-hidden-size",), int, "model", "moe_ffn_hidden_size", "expert FFN size"),
    _o("moe_shared_expert_intermediate_size", ("--moe-shared-expert-intermediate-size",), int, "model",
       "moe_shared_expert_intermediate_size", "FFN size of the shared expert(s)"),
    _o("moe_layer_freq", ("--moe-layer-freq",), int, "model", "moe_layer_freq", "every n-th layer is MoE"),
    _o("moe_first_k_dense", ("--moe-first-k-dense",), int, "model", "moe_first_k_dense",
       "the first k layers are dense (DeepSeek's first_k_dense_replace)"),
    _o("moe_expert_capacity_factor", ("--moe-expert-capacity-factor",), float, "model",
       "moe_expert_capacity_factor", "expert capacity (token dropping); default dropless"),
    _o("moe_load_imbalance", ("--moe-load-imbalance",), float, "model", "moe_load_imbalance",
       "tokens of the busiest expert-parallel rank / the mean (default 1: balanced)"),
    _o("moe_router_enable_expert_bias", ("--moe-router-enable-expert-bias",), bool, "model",
       "moe_router_enable_expert_bias", "auxiliary-loss-free load balancing (expert bias)"),
    _o("multi_latent_attention", ("--multi-latent-attention",), bool, "model", "multi_latent_attention",
       "multi-head latent attention (MLA)"),
    _o("q_lora_rank", ("--q-lora-rank",), int, "model", "q_lora_rank", "MLA query compression rank"),
    _o("kv_lora_rank", ("--kv-lora-rank",), int, "model", "kv_lora_rank", "MLA key/value compression rank"),
    _o("mtp_num_layers", ("--mtp-num-layers",), int, "model", "mtp_num_layers", "multi-token prediction depth"),
    # system
    _o("gpus_per_node", ("--gpus-per-node",), int, "system", "gpus_per_node",
       "GPUs per node / NVLink domain (e.g. 4, 8, 72)"),
    _o("nics_per_node", ("--nics-per-node",), int, "system", "nics_per_node", "scale-out NICs per node"),
    _o("nic_bandwidth_gbps", ("--nic-bandwidth-gbps",), float, "system", "nic_bandwidth_gbps", "Gb/s per NIC"),
    _o("price_per_gpu_hour", ("--price-per-gpu-hour",), float, "system", "price_per_gpu_hour", "USD per GPU-hour"),
    # parallelism
    _o("tp", ("--tensor-model-parallel-size", "--tp"), int, "parallelism", "tp", "tensor parallel size"),
    _o("pp", ("--pipeline-model-parallel-size", "--pp"), int, "parallelism", "pp", "pipeline parallel size"),
    _o("vpp", ("--num-virtual-stages-per-pipeline-rank", "--vpp"), int, "parallelism", "vpp",
       "virtual stages per pipeline rank (interleaving)"),
    _o("cp", ("--context-parallel-size", "--cp"), int, "parallelism", "cp", "context parallel size"),
    _o("ep", ("--expert-model-parallel-size", "--ep"), int, "parallelism", "ep", "expert parallel size"),
    _o("etp", ("--expert-tensor-parallel-size", "--etp"), int, "parallelism", "etp",
       "tensor parallel size of the expert layers (default: tp)"),
    _o("tensor_parallel_mode", ("--tensor-parallel-mode",), str, "parallelism", "tensor_parallel_mode",
       "linear-layer sharding: 1d (Megatron, default) or summa (2D grid of --tp-rows × tp/rows GPUs)"),
    _o("tp_rows", ("--tp-rows",), int, "parallelism", "tp_rows",
       "summa: rows of the tensor-parallel grid (columns = tp/rows; default: the largest divisor ≤ √tp)"),
    _o("summa_blocks", ("--summa-blocks",), int, "parallelism", "summa_blocks",
       "summa: panels each GEMM is broadcast in, pipelined against the GEMM blocks (default 4)"),
    _o("tp_inner", ("--tp-inner",), str, "parallelism", "tp_inner",
       "summa: grid group on adjacent ranks (inside the NVLink domain first): row (activation broadcasts, "
       "default) or col (weight broadcasts)"),
    _o("dp", ("--data-parallel-size", "--dp"), int, "parallelism", "dp", "data parallel size (checked)"),
    _o("sequence_parallel", ("--sequence-parallel",), bool, "parallelism", "sequence_parallel",
       "sequence parallelism"),
    _o("schedule", ("--schedule",), str, "parallelism", "schedule", schedule_help()),
    _o("rank_order", ("--rank-order",), str, "parallelism", "rank_order", "e.g. tp-cp-ep-dp-pp"),
    _o("first_stage_layers", ("--decoder-first-pipeline-num-layers",), int, "parallelism", "first_stage_layers",
       "layers on the first stage"),
    _o("last_stage_layers", ("--decoder-last-pipeline-num-layers",), int, "parallelism", "last_stage_layers",
       "layers on the last stage"),
    _o("account_for_embedding_in_pipeline_split", ("--account-for-embedding-in-pipeline-split",), bool,
       "parallelism", "account_for_embedding_in_pipeline_split", "count the embedding as a layer of the first stage"),
    _o("account_for_loss_in_pipeline_split", ("--account-for-loss-in-pipeline-split",), bool,
       "parallelism", "account_for_loss_in_pipeline_split", "count the loss as a layer of the last stage"),
    _o("pipeline_layout", ("--pipeline-model-parallel-layout",), str, "parallelism", "pipeline_layout",
       "layers per virtual stage, e.g. 'Et|(tt|)*30L' (Megatron syntax)"),
    # training
    _o("micro_batch_size", ("--micro-batch-size", "--mbs"), int, "training", "micro_batch_size",
       "micro-batch size (default 1)"),
    _o("global_batch_size", ("--global-batch-size", "--gbs"), int, "training", "global_batch_size",
       "global batch size (sequences)"),
    _o("seq_length", ("--seq-length",), int, "training", "seq_length", "training sequence length"),
    _o("recompute_granularity", ("--recompute-granularity",), str, "training", "recompute_granularity",
       "none, selective or full"),
    _o("recompute_num_layers", ("--recompute-num-layers",), int, "training", "recompute_num_layers",
       "layers per stage recomputed (full)"),
    _o("use_distributed_optimizer", ("--use-distributed-optimizer",), bool, "training", "use_distributed_optimizer",
       "distributed optimizer (ZeRO-1)"),
    _o("zero_stage", ("--zero-stage",), int, "training", "zero_stage", "ZeRO stage 0-3"),
    _o("overlap_grad_reduce", ("--overlap-grad-reduce",), bool, "training", "overlap_grad_reduce",
       "overlap DP gradient reduction with backward"),
    _o("overlap_param_gather", ("--overlap-param-gather",), bool, "training", "overlap_param_gather",
       "overlap parameter all-gather with forward"),
    _o("tp_comm_overlap", ("--tp-comm-overlap",), bool, "training", "tp_comm_overlap",
       "overlap TP communication with GEMMs"),
    _o("no_overlap_p2p_comm", ("--no-overlap-p2p-communication",), bool, "training", "overlap_p2p_comm",
       "interleaved schedule: block on pipeline send/recv", inverted=True),
    _o("fp16", ("--fp16",), bool, "training", "precision", "fp16 mixed precision"),
    _o("bf16", ("--bf16",), bool, "training", "precision", "bf16 mixed precision (default)"),
    _o("fp8", ("--fp8",), bool, "training", "precision", "FP8 GEMMs (Transformer Engine)"),
    _o("fp32", ("--fp32",), bool, "training", "precision", "fp32 training (TF32 GEMMs)"),
    _o("fp8_recipe", ("--fp8-recipe",), str, "training", "fp8_recipe",
       "FP8 scaling: delayed, tensorwise, blockwise or mxfp8 (implies --fp8)"),
    _o("recompute_modules", ("--recompute-modules",), str, "training", "recompute_modules",
       "modules recomputed in backward: mla_up_proj, moe_act (comma-separated)"),
    _o("moe_shared_expert_overlap", ("--moe-shared-expert-overlap",), bool, "training",
       "moe_shared_expert_overlap", "run the shared expert while tokens are dispatched"),
    _o("moe_a2a_overlap", ("--overlap-moe-expert-parallel-comm",), bool, "training", "moe_a2a_overlap",
       "hide the expert all-to-all behind another micro-batch's compute (merged 1F1B / DualPipe)"),
    _o("attention", ("--attention",), str, "training", "attention",
       "core attention path: flash, unfused (fused softmax on s² scores) or eager (fp32 softmax chain)"),
    # framework (software stack) overrides, Megatron names
    _o("transformer_impl", ("--transformer-impl",), str, "framework", "transformer_impl",
       "transformer_engine or local (local also selects the local attention unless --attention-backend)"),
    _o("attention_backend", ("--attention-backend",), str, "framework", "attention_backend",
       "flash, fused, unfused or local"),
    _o("no_masked_softmax_fusion", ("--no-masked-softmax-fusion",), bool, "framework", "masked_softmax_fusion",
       "eager softmax instead of the fused scale-mask-softmax kernel", inverted=True),
    _o("no_gradient_accumulation_fusion", ("--no-gradient-accumulation-fusion",), bool, "framework",
       "gradient_accumulation_fusion", "wgrad GEMMs do not accumulate into main_grad directly", inverted=True),
    _o("cross_entropy_loss_fusion", ("--cross-entropy-loss-fusion",), bool, "framework", "fused_cross_entropy",
       "fused cross-entropy (no fp32 logits copies)"),
    _o("main_params_dtype", ("--main-params-dtype",), str, "framework", "main_params_dtype",
       "master weights: fp32, bf16, fp16 or param (no copy)"),
    _o("exp_avg_dtype", ("--exp-avg-dtype",), str, "framework", "exp_avg_dtype", "Adam first moment dtype"),
    _o("exp_avg_sq_dtype", ("--exp-avg-sq-dtype",), str, "framework", "exp_avg_sq_dtype",
       "Adam second moment dtype"),
    _o("optimizer_impl", ("--optimizer-impl",), str, "framework", "optimizer_impl", "fused, foreach or loop"),
    _o("enable_cuda_graph", ("--enable-cuda-graph",), bool, "framework", "cuda_graphs",
       "CUDA graphs (host dispatch per kernel no longer on the critical path)"),
    _o("grad_reduce_in_bf16", ("--grad-reduce-in-bf16",), bool, "training", "grad_reduce_in_fp32",
       "reduce gradients in 16-bit instead of fp32", inverted=True),
    _o("train_tokens", ("--train-tokens",), float, "training", "train_tokens", "tokens to train on (e.g. 300e9)"),
)

_BY_NAME = {o.name: o for o in JOB_OPTIONS}
PRECISION_FLAGS = ("fp16", "bf16", "fp8", "fp32")


def _parameter(opt: JobOption, as_text: bool) -> inspect.Parameter:
    if opt.kind is bool:
        annotation: Any = bool
        default = typer.Option(False, *opt.flags, help=opt.help, show_default=False)
    else:
        annotation = str | None if as_text else opt.kind | None
        default = typer.Option(opt.default if not as_text or opt.default is None else str(opt.default),
                               *opt.flags, help=opt.help)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def with_job_options(as_text: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: add the job flags to a Typer command, which receives them as ``job_options``.

    A parameter of the command itself with a job flag's name (e.g. ``profile --attention-backend``, the SDPA
    backend to measure) takes precedence: that job flag is not added.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(func)
        own = [p for p in sig.parameters.values() if p.name != "job_options"]
        own_names = {p.name for p in own}
        added = [o for o in JOB_OPTIONS if o.name not in own_names]
        names = {o.name for o in added}

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            job_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
            return func(job_options=job_kwargs, **kwargs)

        params = own + [_parameter(o, as_text) for o in added]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _precision(values: dict[str, Any]) -> str | None:
    chosen = [p for p in PRECISION_FLAGS if values.get(p)]
    if len(chosen) > 1:
        raise TrainsimError("training.precision", f"several precisions given ({', '.join(chosen)})",
                            "give one of --fp16, --bf16, --fp8, --fp32")
    return chosen[0] if chosen else None


def job_from_options(values: dict[str, Any]):  # type: ignore[no-untyped-def]  # -> Job (lazy import)
    """Build a validated :class:`~trainsim.spec.job.Job` from flag values (``None``/``False`` = not given)."""
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model
    from trainsim.spec.parallelism import Parallelism
    from trainsim.spec.presets import load_model, load_system
    from trainsim.spec.training import Training

    sections: dict[str, dict[str, Any]] = {"model": {}, "system": {}, "parallelism": {}, "training": {},
                                           "framework": {}}
    for name, value in values.items():
        opt = _BY_NAME[name]
        if opt.section == "job" or name in PRECISION_FLAGS or value is None or value is False:
            continue
        if opt.inverted:
            value = False
        elif name == "use_distributed_optimizer":
            if values.get("zero_stage") is not None and values["zero_stage"] < 1:
                raise TrainsimError("training.zero_stage", "--use-distributed-optimizer is ZeRO stage 1",
                                    "drop --zero-stage 0 or --use-distributed-optimizer")
            sections["training"].setdefault("zero_stage", 1)
            continue
        if name == "recompute_modules":
            value = tuple(v for v in str(value).replace(",", " ").split() if v)
        sections[opt.section][opt.field] = value
    precision = _precision(values)
    if precision is None and values.get("fp8_recipe"):
        precision = "fp8"  # a recipe only exists for FP8 training
    if precision:
        sections["training"]["precision"] = precision
    if "global_batch_size" not in sections["training"]:
        raise TrainsimError("training.global_batch_size", "is required", "give --global-batch-size (or --gbs)")

    # model: a preset/file, possibly overridden by explicit flags, or built from the flags alone
    model_ref = values.get("model")
    overrides = sections["model"]
    if model_ref:
        model = load_model(model_ref)
        if overrides:
            model = model.replace(**overrides)
    else:
        missing = [f for f in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size") if f not in overrides]
        if missing:
            flags = ", ".join("--" + m.replace("_", "-") for m in missing)
            raise TrainsimError("model", "no --model preset and the architecture flags are incomplete",
                                f"give --model NAME or also {flags}")
        if "seq_length" not in overrides and "seq_length" in sections["training"]:
            overrides["seq_length"] = sections["training"]["seq_length"]  # Megatron: max positions default to it
        model = Model(**overrides)

    system = load_system(values.get("system") or "dgx-h100")
    s = sections["system"]
    if s:
        node, network = system.node, system.network
        if "gpus_per_node" in s:
            node = node.replace(gpus_per_node=s["gpus_per_node"])
        if "nics_per_node" in s:
            network = network.replace(nics_per_node=s["nics_per_node"])
        if "nic_bandwidth_gbps" in s:
            if s["nic_bandwidth_gbps"] <= 0:
                raise TrainsimError("system.network.nic_bandwidth_gbps", "must be positive", "give Gb/s per NIC")
            network = network.replace(nic_bandwidth=s["nic_bandwidth_gbps"] * 1e9 / 8)
        system = system.replace(node=node, network=network, price_per_gpu_hour=s.get(
            "price_per_gpu_hour", system.price_per_gpu_hour))
    return Job(
        model=model,
        system=system,
        parallelism=Parallelism(**sections["parallelism"]),
        training=Training(**sections["training"]),
        num_gpus=values.get("num_gpus"),
        framework=framework_from_options(values.get("framework"), sections["framework"]),
    )


def framework_from_options(name: str | None, overrides: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The framework profile ``name`` (default megatron-core) with the individual flags applied.

    ``--transformer-impl local`` also selects Megatron's local attention (the local layer spec) unless
    ``--attention-backend`` is given; ``--enable-cuda-graph`` removes the host dispatch cost per kernel.
    """
    from trainsim.spec.framework import load_framework

    fw = load_framework(name)
    if not overrides:
        return fw
    over = dict(overrides)
    if over.get("transformer_impl") == "local" and "attention_backend" not in over:
        over["attention_backend"] = "local"
    if over.get("cuda_graphs"):
        over["host_dispatch_s"] = 0.0
    return fw.replace(**over)
