"""The software stack of a job: a framework profile (``presets/frameworks/*.yaml``).

The same model, plan and GPU run at very different speeds and memory under different frameworks. A
:class:`Framework` states, field by field and each with its source (framework code, documentation, release notes),
what the stack does: the attention path, which elementwise ops are fused, the optimizer implementation and its
dtypes, the data-parallel engine and its overlap, the gradient-reduce dtype, the pipeline engine and its layer
split, host dispatch, and memory conventions. Cost and memory models read these fields; fitted constants describe
only what no document states.

Selected with ``--framework NAME[@version]`` (Python: ``Job(framework="nemo")``); every field can be overridden by
an individual flag (Megatron names where they exist). ``job.framework`` is the *resolved* profile: the preset with
the job's overrides applied, and the conditional features (parameter-gather overlap, TP-communication overlap)
switched off where the plan cannot use them. docs/model.md lists every field with its sources.
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from trainsim.errors import TrainsimError
from trainsim.spec.base import Spec
from trainsim.spec.flags import Flag
from trainsim.spec.training import element_bytes, grad_element_bytes

AttentionBackend = Literal["flash", "fused", "unfused", "local"]
TransformerImpl = Literal["transformer_engine", "local"]
OptimizerImpl = Literal["fused", "foreach", "loop"]
StateDtype = Literal["fp32", "bf16", "fp16", "fp8"]
MasterDtype = Literal["fp32", "bf16", "fp16", "param"]
GradReduceDtype = Literal["fp32", "param"]
GatherGranularity = Literal["layer", "module", "tensor"]
ModuleLayout = Literal["transformers", "megatron"]
BackwardPrefetch = Literal["pre", "post", "none"]
CPCommType = Literal["p2p", "allgather", "a2a", "a2a+p2p"]
ShardingStrategy = Literal["full", "hybrid"]
DPEngine = Literal["megatron-ddp", "torch-ddp", "deepspeed", "deepspeed-zero", "fsdp1", "fsdp2", "megatron-fsdp"]
PipelineEngine = Literal["megatron", "deepspeed", "torch-pipelining", "none"]
LayerSplit = Literal["even", "type:transformer", "parameters", "account-for-embedding-and-loss"]
AttentionPath = Literal["flash", "unfused", "eager"]
SelectiveRecompute = Literal["core_attention", "op"]
#: How a stack issues the local experts' GEMMs (Framework.moe_expert_launch).
MoeExpertLaunch = Literal["python_loop", "cpp_loop", "grouped_kernel"]
#: The kernel library of a stack's flash attention (Framework.flash_kernel; trainsim.cost.attention_kernels).
FlashKernel = Literal["cudnn", "fa3", "fa2", "fa1", "cudnn-blackwell"]
#: Which sequence-parallel all-gathers an FP8 run sends in FP8 (Framework.fp8_tp_gather).
Fp8TpGather = Literal["none", "forward", "both"]
CrossEntropyImpl = Literal["vocab_parallel", "torch", "torch_16bit"]

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}

# Fields that describe the profile rather than the stack (no source needed).
META_FIELDS = frozenset({"name", "version", "description", "sources"})
# Optional stack fields: ``None`` means "the engine's own rule", documented with the engine.
OPTIONAL_FIELDS = frozenset({"virtual_stages_default", "gradient_accumulation_fusion_fp32_only",
                             "bucket_size_params", "prefetch_bucket_params", "shard_grads_with_pp",
                             "gather_granularity", "module_layout", "max_live_params", "max_reuse_params",
                             "param_persistence_threshold",
                             "forward_prefetch", "backward_prefetch", "limit_all_gathers", "all_gather_copy_out",
                             "cp_comm_type", "sharding_strategy", "gather_device_sync", "collective_rank_lists",
                             "train_metric_passes", "compiled_causal_mask", "attention_layout",
                             "bf16_optimizer_partitions", "bf16_optimizer_with_pp", "moe_tp_shards_sequence",
                             "fp8_tp_gather", "transformers_model_code"})


class Framework(Spec, frozen=True):
    """One software stack. Every stack field has an entry in ``sources`` saying where the fact comes from."""

    name: str
    version: str = ""
    description: str = ""
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> where the fact is documented")

    # ---- layers and attention --------------------------------------------------------------------------------------
    transformer_impl: Annotated[TransformerImpl, Flag(
        "--transformer-impl",
        help="transformer_engine or local (local also selects the local attention unless "
             "--attention-backend)")] = Field(
        description="Megatron --transformer-impl: TE modules or local/torch")
    attention_backend: Annotated[AttentionBackend, Flag("--attention-backend",
                                                        help="flash, fused, unfused or local")] = Field(
        description="Megatron --attention-backend: flash/fused (FlashAttention / cuDNN fused attention, no s² "
                    "tensors), unfused (TE's unfused DotProductAttention), local (Megatron's own DotProductAttention)")
    flash_kernel: Annotated[FlashKernel, Flag(
        "--flash-kernel", megatron=False,
        help="cudnn, fa3, fa2, fa1 or cudnn-blackwell: the flash attention kernel library")] = Field(
        description="the flash attention kernel library: cudnn (cuDNN fused attention: Transformer Engine on Hopper "
                    "and newer, PyTorch >= 2.11 SDPA), fa3 (FlashAttention-3), fa2 (FlashAttention-2: flash-attn "
                    "2.x, PyTorch 2.2-2.10 SDPA; about 0.6 of cuDNN's throughput on Hopper and Blackwell), fa1 "
                    "(FlashAttention-1's algorithm: flash-attn 1.x, its Triton port, PyTorch 2.0-2.1 SDPA; half of "
                    "FlashAttention-2's throughput, 32.5 % of the A100's peak) or cudnn-blackwell (cuDNN from "
                    "Blackwell on, FlashAttention-2 before: torchtitan)")
    masked_softmax_fusion: Annotated[bool, Flag(
        "--no-masked-softmax-fusion", const=False,
        help="eager softmax instead of the fused scale-mask-softmax kernel")] = Field(
        description="unfused/local paths: the fused scale-mask-softmax CUDA kernel runs when its limits allow; else "
                    "the eager PyTorch chain (upcast, masked_fill, softmax, downcast)")
    fused_softmax_max_seq: int = Field(gt=0, description="longest key length the fused softmax kernel accepts")
    attention_softmax_in_fp32: bool = Field(description="eager softmax chain computed in fp32 (upcast/downcast)")
    dropout: bool = Field(description="the model's dropout layers exist and run (hidden and attention dropout)")
    # ---- elementwise fusion --------------------------------------------------------------------------------------
    fused_norm: bool = Field(description="LayerNorm/RMSNorm as one kernel (else eager: fp32 upcast, mean, rsqrt...)")
    fused_bias_activation: Annotated[bool, Flag(
        "--no-bias-swiglu-fusion", "--no-bias-gelu-fusion", const=False,
        help="bias-GELU / SwiGLU as separate eager kernels")] = Field(description="bias-GELU / SwiGLU as one kernel")
    fused_bias_dropout_add: Annotated[bool, Flag(
        "--no-bias-dropout-fusion", const=False, help="bias, dropout and residual add as separate kernels")] = Field(
        description="bias + dropout + residual add as one kernel")
    fused_rope: Annotated[bool, Flag("--no-rope-fusion", const=False, help="rotary embedding as eager ops")] = Field(
        description="rotary embedding as one kernel (else eager rotate_half chain)")
    fused_cross_entropy: Annotated[bool, Flag("--cross-entropy-loss-fusion", param="cross_entropy_loss_fusion",
                                              help="fused cross-entropy (no fp32 logits copies)")] = Field(
        description="vocabulary-parallel cross-entropy fused (no fp32 logits copies)")
    cross_entropy_impl: Annotated[CrossEntropyImpl, Flag(
        "--cross-entropy-impl", megatron=False,
        help="unfused loss: vocab_parallel (Megatron), torch (F.cross_entropy on fp32 logits) or torch_16bit "
             "(F.cross_entropy on the 16-bit logits)")] = Field(
        description="the unfused loss's kernels: vocab_parallel (Megatron's VocabParallelCrossEntropy: upcast, max, "
                    "subtract, exp, sum, divide; backward multiply and downcast), torch (F.cross_entropy on "
                    "upcast logits: log_softmax and nll_loss) or torch_16bit (F.cross_entropy on the 16-bit logits, "
                    "no upcast: NeMo AutoModel's MaskedCrossEntropy(fp32_upcast=False))")
    gradient_accumulation_fusion: Annotated[bool, Flag(
        "--no-gradient-accumulation-fusion", const=False,
        help="wgrad GEMMs do not accumulate into main_grad directly")] = Field(
        description="weight-gradient GEMM accumulates straight into the fp32 main_grad buffer")
    gradient_accumulation_fusion_fp32_only: bool | None = Field(
        default=None, description="gradient-accumulation fusion only with fp32 gradient accumulation (Megatron-LM's "
                                  "arguments.py switches it off otherwise, e.g. fp16 without "
                                  "--accumulate-allreduce-grads-in-fp32); None: no such rule")
    # ---- optimizer -----------------------------------------------------------------------------------------------
    optimizer_cpu_offload: bool = Field(
        description="the stack can keep the optimizer (master weights, moments, step) on the host CPU while the "
                    "parameters stay on the GPU (--optimizer-cpu-offload)")
    param_cpu_offload: bool = Field(
        description="the stack can keep the ZeRO-3 / FSDP parameter and gradient shards and the optimizer on the host "
                    "CPU (--param-cpu-offload)")
    optimizer_impl: Annotated[OptimizerImpl, Flag("--optimizer-impl", megatron=False,
                                                  help="fused, foreach or loop")] = Field(
        description="fused (one kernel), foreach (multi-tensor with temporaries), "
                                                      "loop (per-parameter kernels)")
    main_params_dtype: Annotated[MasterDtype, Flag(
        "--main-params-dtype", help="master weights: fp32, bf16, fp16 or param (no copy)")] = Field(
        description="master weights (param: no separate copy)")
    exp_avg_dtype: Annotated[StateDtype, Flag("--exp-avg-dtype", help="Adam first moment dtype")] = Field(
        description="Adam first moment")
    exp_avg_sq_dtype: Annotated[StateDtype, Flag("--exp-avg-sq-dtype", help="Adam second moment dtype")] = Field(
        description="Adam second moment")
    # ---- data parallelism ----------------------------------------------------------------------------------------
    dp_engine: DPEngine = Field(description="data-parallel engine (ZeRO stages below 3)")
    sharded_engine: DPEngine | None = Field(description="engine that shards parameters (ZeRO-3 / FSDP), if any")
    default_zero_stage: int = Field(ge=0, le=3, description="sharding stage when the job gives none")
    grad_reduce_dtype: GradReduceDtype = Field(
        description="gradient accumulation and reduction dtype: fp32, or the training dtype (param). Megatron's fp32 "
                    "buffer is 16-bit under fp16 training (--accumulate-allreduce-grads-in-fp32 is off for fp16)")
    overlap_grad_reduce: bool = Field(description="gradient reduction overlapped with the backward pass")
    overlap_param_gather: bool = Field(description="parameter all-gather overlapped with the forward pass "
                                                   "(distributed optimizer / ZeRO only)")
    tp_comm_overlap: bool = Field(description="TP communication overlapped with GEMMs (TE userbuffers; needs SP)")
    transformers_model_code: bool | None = Field(
        default=None, description="the stack trains transformers' modeling code: flash attention goes through PyTorch "
                                  "SDPA's default backend order (the PyTorch release picks the kernel; a GPU no "
                                  "flash kernel runs on gets SDPA's memory-efficient kernel) and ALiBi or "
                                  "attention-sink models (BLOOM, MPT, GPT-OSS), which transformers implements without "
                                  "SDPA, attend eagerly; None: no")
    fp8_tp_gather: Fp8TpGather | None = Field(
        default=None, description="FP8 training with sequence parallelism under a per-tensor scaling recipe (delayed, "
                                  "tensorwise): which all-gathers move the quantized tensor, 1 byte per element: "
                                  "forward (the column-parallel inputs and their backward re-gather), both (also the "
                                  "row-parallel output gradients); None: none (16-bit gathers)")
    async_tp_grad_reduce: Annotated[bool, Flag(
        "--no-async-tensor-model-parallel-allreduce", const=False,
        help="the input-gradient all-reduce of a column-parallel linear blocks instead of running under its "
             "weight-gradient GEMM")] = Field(
        description="backward of a column-parallel linear: the input-gradient all-reduce (reduce-scatter with "
                    "sequence parallelism) runs asynchronously under the weight-gradient GEMM, and the input "
                    "re-gather under the data-gradient GEMM (Megatron >= 2022, Megatron-Core); else the autograd "
                    "collective blocks after the linear's backward (Megatron-LM 2021's "
                    "copy_to_tensor_model_parallel_region, DTensor without async TP)")
    bucket_size_params: Annotated[int | None, Flag(
        "--reduce-bucket-size", megatron=False,
        help="gradient elements per reduce bucket (DeepSpeed reduce_bucket_size)")] = Field(
        default=None, gt=0, description="parameters per gradient bucket (None: the engine's rule); DeepSpeed "
                                        "ZeRO-3 reduce-scatters its gradients bucket by bucket at this size")
    reshard_after_forward: bool = Field(description="ZeRO-3/FSDP: parameters freed after forward, re-gathered in "
                                                    "backward")
    shard_grads_with_pp: bool | None = Field(
        default=None, description="ZeRO-3/FSDP with pipelining: gradients kept sharded through the step (reduce-"
                                  "scattered as each chunk's backward of a round of micro-batches finishes; Llama 3: "
                                  "'shards optimizer states and gradients'); None: the engine's rule, accumulated "
                                  "unsharded and reduce-scattered once per step (torchtitan, Megatron FSDP)")
    prefetch_depth: int = Field(ge=0, description="ZeRO-3/FSDP: layers (or buckets) gathered ahead of use")
    prefetch_bucket_params: Annotated[int | None, Flag(
        "--stage3-prefetch-bucket-size", megatron=False,
        help="ZeRO-3: elements per prefetch all-gather (DeepSpeed stage3_prefetch_bucket_size)")] = Field(
        default=None, gt=0, description="ZeRO-3: parameters prefetched ahead of use (DeepSpeed's "
                                        "stage3_prefetch_bucket_size); None: whole layers")
    gather_granularity: Annotated[GatherGranularity | None, Flag(
        "--zero3-gather-unit", megatron=False,
        help="ZeRO-3/FSDP gather unit: layer (FSDP unit per block), module (DeepSpeed sub-modules) or tensor "
             "(DeepSpeed <= 0.5: every parameter)")] = Field(
        default=None, description="ZeRO-3/FSDP: what one all-gather fetches: a whole layer (FSDP's wrapped block, "
                                  "FSDP2's fully_shard module), one sub-module (DeepSpeed's fetch_sub_module) or one "
                                  "parameter tensor (DeepSpeed <= 0.5's _allgather_param); None: layer")
    module_layout: ModuleLayout | None = Field(
        default=None, description="the model code's projections: transformers (separate q/k/v and gate/up "
                                  "projections) or megatron (one fused QKV GEMM whose output is split into query, "
                                  "key and value views, its backward concatenating their gradients; fused gate/up); "
                                  "read by per-module ZeRO-3 gathers and the QKV gradient concatenation; None: "
                                  "transformers")
    max_live_params: Annotated[int | None, Flag(
        "--stage3-max-live-parameters", megatron=False,
        help="ZeRO-3: gathered elements kept at most (DeepSpeed stage3_max_live_parameters)")] = Field(
        default=None, gt=0, description="ZeRO-3: gathered parameter elements alive at once, prefetches included "
                                        "(DeepSpeed's stage3_max_live_parameters); None: no limit")
    max_reuse_params: Annotated[int | None, Flag(
        "--stage3-max-reuse-distance", megatron=False,
        help="ZeRO-3: a parameter used again within this many elements stays gathered (DeepSpeed)")] = Field(
        default=None, gt=0, description="ZeRO-3: a released parameter is kept gathered when the parameter elements "
                                        "used before its next use are fewer (DeepSpeed's stage3_max_reuse_distance); "
                                        "with full recompute a sub-module's recompute forward and its backward are "
                                        "that far apart; None: no limit (kept)")
    param_persistence_threshold: Annotated[int | None, Flag(
        "--stage3-param-persistence-threshold", megatron=False,
        help="ZeRO-3: parameters smaller than this stay gathered (DeepSpeed)")] = Field(
        default=None, ge=0, description="ZeRO-3: parameter tensors with fewer elements stay gathered and are never "
                                        "all-gathered (DeepSpeed's stage3_param_persistence_threshold); None: 0")
    forward_prefetch: Annotated[bool | None, Flag(
        "--forward-prefetch", megatron=False, help="FSDP1: explicit forward prefetch of the next unit")] = Field(
        default=None, description="FSDP1 forward_prefetch: the next unit's all-gather issued explicitly before "
                                  "the current forward (else implicitly when the CPU reaches it)")
    backward_prefetch: Annotated[BackwardPrefetch | None, Flag(
        "--backward-prefetch", megatron=False,
        help="FSDP1 backward prefetch: pre, post or none (BACKWARD_PRE / BACKWARD_POST / None)")] = Field(
        default=None, description="FSDP1 backward_prefetch: pre (next all-gather before the current gradient "
                                  "computation), post (after it, before the current reduce-scatter) or none "
                                  "(when the next unit's backward hook runs, after the reduce-scatter); None: pre")
    limit_all_gathers: Annotated[bool | None, Flag(
        "--no-limit-all-gathers", const=False, megatron=False,
        help="FSDP1: no rate limiter (the CPU issues all-gathers ahead without bound)")] = Field(
        default=None, description="FSDP1 limit_all_gathers: at most two all-gathered units in flight, so the "
                                  "forward prefetches one unit ahead; False lets the CPU issue every gather ahead")
    sharding_strategy: Annotated[ShardingStrategy | None, Flag(
        "--sharding-strategy", megatron=False,
        help="ZeRO-3/FSDP: full (FULL_SHARD over all data-parallel ranks) or hybrid (HYBRID_SHARD / HSDP: shard "
             "over the ranks of a node, replicate across nodes)")] = Field(
        default=None, description="ZeRO-3/FSDP sharding: full (FULL_SHARD) or hybrid (FSDP1 HYBRID_SHARD, FSDP2 "
                                  "HSDP: parameters, gradients and optimizer states sharded over the data-parallel "
                                  "ranks of one node, replicated across nodes; gradients reduce-scattered inside "
                                  "the node, then all-reduced across replicas); None: full")
    all_gather_copy_out: bool | None = Field(
        default=None, description="FSDP2: the all-gather output is copied into the per-parameter tensors on the "
                                  "compute stream (foreach_all_gather_copy_out); the reduce-scatter input is "
                                  "copied in (foreach_reduce_scatter_copy_in) on its stream")
    gather_device_sync: bool | None = Field(
        default=None, description="ZeRO-3: the host synchronizes the whole device (torch.cuda.synchronize) before "
                                  "every parameter all-gather, so gathers, reduce-scatters and compute never overlap "
                                  "and the next compute is launched only once the host has issued the gathers "
                                  "(DeepSpeed <= 0.5, 2021); None: False")
    collective_rank_lists: bool | None = Field(
        default=None, description="ZeRO-3 collectives through torch.distributed's list API, one collective per "
                                  "parameter tensor: all_gather into / reduce_scatter from one tensor view per rank, "
                                  "which PyTorch's ProcessGroupNCCL flattens with one copy per rank, so the host "
                                  "dispatches world-size copies (host_dispatch_s each) per collective (DeepSpeed <= "
                                  "0.5, 2021); None: False (flat buffers, coalesced)")
    bf16_optimizer_partitions: bool | None = Field(
        default=None, description="bf16 training at ZeRO stage 0 runs an optimizer that partitions the fp32 master "
                                  "weights and Adam moments over the data-parallel ranks and all-gathers the updated "
                                  "16-bit weights after its step, gradients all-reduced whole (DeepSpeed's "
                                  "BF16_Optimizer, ZeRO-1's footprint); None: False")
    bf16_optimizer_with_pp: bool | None = Field(
        default=None, description="bf16 ZeRO-1 with pipelining runs that partitioned optimizer instead (the "
                                  "pipeline engine has no ZeRO-1 with bf16 gradient accumulation): resolved to "
                                  "stage 0 with a warning; None: False")
    max_zero_stage: int = Field(ge=0, le=3, description="highest ZeRO/sharding stage the engine offers")
    max_zero_stage_with_pp: int = Field(ge=0, le=3, description="highest stage accepted together with pipelining")
    # ---- parallelism the stack offers ----------------------------------------------------------------------------
    supports_tp: bool = Field(description="tensor parallelism")
    tp_shards_sequence: bool = Field(
        description="the stack's tensor parallelism always shards norms and residuals over the sequence (sequence "
                    "parallelism on whenever tp > 1); else --sequence-parallel is the user's choice")
    moe_tp_shards_sequence: bool = Field(
        default=False, description="a mixture-of-experts model with tensor parallelism must run sequence-parallel "
                                   "(Megatron-Core refuses it otherwise), so it is on for such jobs")
    supports_cp: bool = Field(description="context parallelism")
    supports_ep: bool = Field(description="expert parallelism")
    cp_comm_type: Annotated[CPCommType | None, Flag(
        "--cp-comm-type", help="context-parallel attention communication: p2p (ring), all_gather, a2a "
                               "(Ulysses all-to-all) or a2a+p2p (hierarchical: all-to-all inside a level, ring "
                               "across levels)")] = Field(
        default=None, description="context-parallel attention communication (Megatron's --cp-comm-type): p2p (ring: "
                                  "K/V blocks passed under the attention kernel), allgather (K/V all-gathered "
                                  "before the attention and dK/dV reduce-scattered after it, exposed) or a2a "
                                  "(DeepSpeed-Ulysses: Q/K/V and the output all-to-all'ed between sequence and "
                                  "head shards around the attention, exposed) or a2a+p2p (hierarchical: all-to-all "
                                  "over adjacent CP ranks, then a ring over the levels; "
                                  "Parallelism.hierarchical_cp_sizes); None: p2p")
    # ---- pipeline ------------------------------------------------------------------------------------------------
    pipeline_engine: PipelineEngine = Field(description="pipeline engine (none: no pipelining offered)")
    pipeline_layer_split: LayerSplit = Field(description="how layers are split over stages")
    pipeline_schedules: list[str] = Field(
        description="pipeline schedules the stack's engine ships (names of trainsim.schedule.SCHEDULES): the open "
                    "search domain; another schedule given explicitly is predicted with a warning, as a what-if")
    virtual_stages_default: Literal["slot-per-chunk"] | None = Field(
        default=None, description="virtual stages a run of this stack uses when a record does not state them "
                                  "(validation rows with an empty vpp cell): slot-per-chunk: one layer slot per "
                                  "model chunk, V = slots / pp (the split rule's slots: layers, plus embedding and "
                                  "loss where they count as a layer); None: not interleaved")
    train_metric_passes: int | None = Field(
        default=None, ge=0, description="forward-only cross-entropy passes over the logits per micro-batch for the "
                                        "training metrics the trainer updates every micro-batch (Composer: the "
                                        "model's train metrics under autocast); None: 0")
    # ---- host ----------------------------------------------------------------------------------------------------
    cuda_graphs: Annotated[bool, Flag(
        "--enable-cuda-graph", "--external-cuda-graph", param="enable_cuda_graph",
        help="CUDA graphs (host dispatch per kernel no longer on the critical path)")] = Field(
        description="CUDA graphs replay the step (no per-kernel launch from Python)")
    torch_compile: Annotated[bool, Flag(
        "--compile", megatron=False,
        help="torch.compile the model (torchtitan --compile.enable): fuses norms, activations, RoPE and "
             "the loss")] = Field(
        description="torch.compile fuses the elementwise chains: norms, activations, bias-dropout-add, RoPE and the "
                    "cross-entropy count as fused whatever the individual fields say")
    attention_layout: Literal["bhsd", "bshd"] | None = Field(
        default=None, description="the fused attention kernel's tensor layout: bhsd (torch SDPA: the model transposes "
                                  "heads in and out, so the output projection keeps a contiguous copy beside the "
                                  "output the kernel saved) or bshd (flash-attn's flash_attn_func, Transformer "
                                  "Engine's sbhd: the output is viewed, not copied); None: bshd")
    compiled_causal_mask: Literal["is_causal", "materialized"] | None = Field(
        default=None, description="how a torch.compile'd model hands the causal mask to SDPA: is_causal (the kernel "
                                  "skips the masked blocks) or materialized (transformers builds the boolean "
                                  "(b, 1, s, s) mask while traced, so SDPA runs every block at the masked kernels' "
                                  "throughput); None: is_causal")
    selective_recompute: SelectiveRecompute = Field(
        description="what --recompute-granularity selective recomputes: core_attention (Megatron, Korthikanti et "
                    "al.: QKᵀ, softmax, dropout and AV, nothing with FlashAttention) or op (torchtitan's op-level "
                    "selective checkpointing: the outputs of every other matmul and of attention are saved, every "
                    "other op is recomputed in backward)")
    host_dispatch_s: float = Field(ge=0, description="CPU time to dispatch one kernel (s); a kernel shorter than "
                                                     "this leaves the GPU waiting")
    host_op_s: float = Field(ge=0, description="CPU time (s) of the stack's eager Python per modelled operator "
                                               "(module code, autograd, the kernels it launches); a layer whose "
                                               "GPU work is shorter waits for its host (torch.compile: "
                                               "host_dispatch_s per op; CUDA graphs: none)")
    moe_expert_launch: Annotated[MoeExpertLaunch, Flag(
        "--moe-expert-launch", megatron=False,
        help="python_loop, cpp_loop or grouped_kernel: how the expert GEMMs are issued (Megatron "
             "--moe-grouped-gemm: cpp_loop)")] = Field(
        description="how the local experts' GEMMs are issued: python_loop (one Python call per expert: "
                    "SequentialMLP, DeepSpeed-MoE, transformers), cpp_loop (one call, one GEMM kernel per expert: "
                    "Transformer Engine GroupedLinear) or grouped_kernel (one grouped GEMM kernel: torch._grouped_mm)")
    # ---- memory conventions --------------------------------------------------------------------------------------
    cuda_context_bytes: float = Field(ge=0, description="CUDA context, cuBLAS/cuDNN workspaces")
    nccl_bytes_per_group: float = Field(ge=0, description="NCCL buffers per communicator")
    allocator_fragmentation: float = Field(ge=0, le=1, description="caching-allocator reserve, fraction of "
                                                                   "dynamic memory")

    @field_validator("cp_comm_type", mode="before")
    @classmethod
    def _cp_comm_spelling(cls, value: Any) -> Any:
        """Megatron's spellings: ``all_gather`` is ``allgather``."""
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            return {"all_gather": "allgather"}.get(key, key)
        return value

    @model_validator(mode="after")
    def _check(self) -> Framework:
        stack = set(type(self).model_fields) - META_FIELDS
        missing = sorted(f for f in stack if f not in self.sources and f not in OPTIONAL_FIELDS)
        if missing:
            raise TrainsimError(f"framework.sources.{missing[0]}", f"profile {self.name!r} gives no source for "
                                f"{len(missing)} field(s): {', '.join(missing[:6])}",
                                "every profile field is a documented fact: add its source")
        unknown = sorted(set(self.sources) - stack)
        if unknown:
            raise TrainsimError(f"framework.sources.{unknown[0]}", "source for an unknown field",
                                "remove it or check the field name")
        from trainsim.schedule import SCHEDULE_NAMES

        unknown_schedules = [s for s in self.pipeline_schedules if s not in SCHEDULE_NAMES]
        if unknown_schedules:
            raise TrainsimError("framework.pipeline_schedules", f"unknown schedule {unknown_schedules[0]!r}",
                                f"use names of trainsim.schedule.SCHEDULES: {', '.join(SCHEDULE_NAMES)}")
        if self.max_zero_stage_with_pp > self.max_zero_stage:
            raise TrainsimError("framework.max_zero_stage_with_pp", "exceeds max_zero_stage",
                                "make it at most max_zero_stage")
        return self

    # ---- derived -------------------------------------------------------------------------------------------------
    def shards_sequence(self, tp: int, moe: bool) -> bool:
        """Whether the stack runs ``tp > 1`` sequence-parallel whatever the user asked: its TP plan always does
        (``tp_shards_sequence``), or it refuses a mixture-of-experts model otherwise (``moe_tp_shards_sequence``)."""
        return tp > 1 and (self.tp_shards_sequence or (self.moe_tp_shards_sequence and moe))

    def runs_chunks(self, vpp: int) -> bool:
        """Whether one of :attr:`pipeline_schedules` runs ``vpp`` model chunks per pipeline rank."""
        from trainsim.schedule import get_schedule

        return vpp == 1 or any(get_schedule(s).accepts_chunks(vpp) for s in self.pipeline_schedules)

    @property
    def interleaved_schedule(self) -> bool:
        """Virtual pipeline stages offered: one of :attr:`pipeline_schedules` interleaves model chunks."""
        from trainsim.schedule import get_schedule

        return any(get_schedule(s).interleaves for s in self.pipeline_schedules)

    @property
    def label(self) -> str:
        """``name@version``."""
        return f"{self.name}@{self.version}" if self.version else self.name

    def attention_path(self, seq_kv: int, attn_batches: int) -> AttentionPath:
        """Which core-attention path runs for a key length and ``batch·heads``.

        ``flash``: FlashAttention-style fused kernel (no s² tensor). ``unfused``: QKᵀ and AV as batched GEMMs with
        the fused scale-mask-softmax kernel on 16-bit scores. ``eager``: the same GEMMs with PyTorch's eager softmax
        chain (fp32 upcast, masked_fill, softmax, downcast) — Megatron's fallback when the fused kernel is not built
        or the shape is outside its limits (``16 < sk <= fused_softmax_max_seq``, ``sk % 4 == 0``, ``b·np % 4 == 0``).
        """
        if self.attention_backend in ("flash", "fused"):
            return "flash"
        ok = (self.masked_softmax_fusion and 16 < seq_kv <= self.fused_softmax_max_seq and seq_kv % 4 == 0
              and attn_batches % 4 == 0)
        return "unfused" if ok else "eager"

    def engine_for(self, zero_stage: int) -> DPEngine:
        """The data-parallel engine that runs a job with this ZeRO stage.

        ZeRO-3 uses :attr:`sharded_engine`; DeepSpeed without ZeRO is the plain ``deepspeed`` engine (all-reduce
        after the backward pass) and with ZeRO-1/2 ``deepspeed-zero``.
        """
        if zero_stage >= 3 and self.sharded_engine is not None:
            return self.sharded_engine
        if self.dp_engine in ("deepspeed", "deepspeed-zero"):
            return "deepspeed-zero" if zero_stage >= 1 else "deepspeed"
        return self.dp_engine

    def param_bytes(self, precision: str) -> float:
        """Bytes of one model parameter as trained."""
        return element_bytes(precision)

    def master_bytes(self, precision: str) -> float:
        """Bytes of the master copy of a parameter (0 when the optimizer updates the model's own parameters)."""
        if self.main_params_dtype in ("param", precision) or precision == "fp32":
            return 0.0
        if precision == "fp8" and self.main_params_dtype == "bf16":
            return 0.0
        return DTYPE_BYTES[self.main_params_dtype]

    def state_bytes(self) -> float:
        """Adam moments per parameter."""
        return DTYPE_BYTES[self.exp_avg_dtype] + DTYPE_BYTES[self.exp_avg_sq_dtype]

    def optimizer_step_bytes(self, precision: str, grads_fp32: bool) -> float:
        """HBM bytes moved per local parameter by one optimizer step (AdamW with gradient clipping).

        Fused (one multi-tensor kernel: apex/TE/DeepSpeed FusedAdam, ``AdamW(fused=True)``): read the gradient,
        read and write the master weights (or the parameters) and both moments, write the 16-bit copy when there
        is a master copy, plus the clipping pass over the gradients and zeroing them for the next step (Megatron's
        ``zero_grad_buffer``; 38 bytes for fp32 master weights, moments and gradients). ``foreach``/``loop`` (torch's
        ``_multi_tensor_adamw``): every update is its own pass — ``lerp_`` of the first moment, ``mul_`` and
        ``addcmul_`` of the second, ``sqrt``/``div_``/``add_`` building the denominator as a temporary, weight
        decay ``mul_`` and ``addcdiv_`` on the weights — and clipping reads the gradients and scales them.
        """
        p = self.param_bytes(precision)
        g = grad_element_bytes(grads_fp32, p)
        m, v = DTYPE_BYTES[self.exp_avg_dtype], DTYPE_BYTES[self.exp_avg_sq_dtype]
        master = self.master_bytes(precision)
        w = master or p  # the weights the optimizer updates
        copy = p if master else 0.0  # master → model parameters
        if self.optimizer_impl == "fused":
            return g + 2 * (m + v) + 2 * w + copy + 2 * g
        denom = v  # the temporary has the second moment's dtype
        return ((2 * m + g) + 2 * v + (2 * v + g) + (v + denom) + 2 * denom + 2 * denom + 2 * w
                + (2 * w + m + denom) + copy + 3 * g)

    def step_transient_bytes(self) -> float:
        """Temporaries of one optimizer step per (local) parameter.

        ``foreach`` AdamW (``torch.optim._multi_tensor_adamw``) materialises ``exp_avg_sq.sqrt()`` for the whole
        parameter group (one tensor of the second-moment dtype per parameter) before ``_foreach_addcdiv_``; the fused
        kernels (apex/TE FusedAdam, ``fused=True``) and the per-parameter loop keep only one tensor's worth.
        """
        return DTYPE_BYTES[self.exp_avg_sq_dtype] if self.optimizer_impl == "foreach" else 0.0


# ---- presets ------------------------------------------------------------------------------------------------------
_DIR = resources.files("trainsim") / "presets" / "frameworks"
DEFAULT_FRAMEWORK = "megatron-core"


def list_frameworks() -> list[str]:
    """Names of the framework presets."""
    return sorted(p.name[:-5] for p in _DIR.iterdir() if p.name.endswith(".yaml"))


def _parse(text: str, origin: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TrainsimError("framework", f"cannot parse {origin} as YAML ({exc})".replace("\n", " "),
                            "fix the file") from None
    if not isinstance(data, dict):
        raise TrainsimError("framework", f"{origin} is not a mapping", "see presets/frameworks/*.yaml")
    return data


def _extended(data: dict[str, Any], origin: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A profile that ``extends: NAME`` a preset: the preset's fields and sources (its own version, not its
    ``versions:``), then this profile's on top."""
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    base_name = str(base_name).lower()
    if base_name not in list_frameworks() or base_name in seen:
        raise TrainsimError("framework.extends", f"{origin} extends {base_name!r}, which is not a preset it can "
                            "extend", f"use one of {', '.join(list_frameworks())}")
    base = _extended(_parse((_DIR / f"{base_name}.yaml").read_text(), f"framework preset {base_name}"),
                     f"framework preset {base_name}", (*seen, base_name))
    base.pop("versions", None)
    own = data.get("sources", {}) or {}
    unsourced = sorted(k for k in data if k not in META_FIELDS | {"versions"} and k not in own)
    if unsourced:
        raise TrainsimError(f"framework.sources.{unsourced[0]}", f"{origin} changes {', '.join(unsourced)} of "
                            f"{base_name} without a source", "every field a profile states is a documented fact: "
                            "add its source")
    sources = {**base.get("sources", {}), **own}
    return {**base, "description": "", "version": "", **data, "sources": sources}


def _with_version(data: dict[str, Any], version: str | None, origin: str) -> dict[str, Any]:
    """Apply a profile's ``versions:`` overrides (each with its own sources) for ``version``."""
    versions: dict[str, Any] = data.pop("versions", None) or {}
    if version is None or version == str(data.get("version", "")):
        return data
    if version not in versions:
        known = [str(data.get("version", ""))] + [str(v) for v in versions]
        raise TrainsimError("framework", f"{origin} has no version {version!r}",
                            f"use one of {', '.join(v for v in known if v)} (or leave @version out)")
    over = dict(versions[version] or {})
    sources = {**data.get("sources", {}), **over.pop("sources", {})}
    return {**data, **over, "sources": sources, "version": version}


@cache
def preset_versions(name: str) -> tuple[str, ...]:
    """Versions a framework preset offers for ``NAME@version``: its own first, then its ``versions:`` overrides."""
    data = _parse((_DIR / f"{name}.yaml").read_text(), f"framework preset {name}")
    own = str(data.get("version", ""))
    return tuple(v for v in (own, *(str(v) for v in (data.get("versions") or {}))) if v)


@cache
def _preset(name: str, version: str | None) -> Framework:
    origin = f"framework preset {name}"
    data = _extended(_parse((_DIR / f"{name}.yaml").read_text(), origin), origin)
    return Framework(**_with_version(data, version, origin))


def load_framework(ref: str | Path | Framework | None = None) -> Framework:
    """A framework by ``NAME[@version]`` (a preset), a YAML file in the same format, or a :class:`Framework`."""
    if isinstance(ref, Framework):
        return ref
    text = str(ref) if ref is not None else DEFAULT_FRAMEWORK
    name, _, version = text.partition("@")
    if name.lower() in list_frameworks():
        return _preset(name.lower(), version or None)
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        try:
            content = path.read_text()
        except OSError as exc:
            raise TrainsimError("framework", f"cannot read {path} ({exc.strerror or exc})",
                                "give a preset name or a YAML path") from None
        data = _extended(_parse(content, str(path)), str(path))
        return Framework(**_with_version(data, version or None, str(path)))
    names = list_frameworks()
    close = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"available: {', '.join(names)}"
    raise TrainsimError("framework", f"unknown framework {text!r}", f"{hint} (or give a profile YAML path)")
