"""Training settings: batch, sequence, recomputation, optimizer sharding, overlap, precision."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trainsim.spec.base import Spec
from trainsim.spec.flags import Flag
from trainsim.spec.limits import MAX_BATCH, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_TRAIN_TOKENS

Recompute = Literal["none", "selective", "full"]
Precision = Literal["fp32", "fp16", "bf16", "fp8"]


def element_bytes(precision: str) -> float:
    """Bytes of one parameter or activation element as trained: 4 in fp32, else 2 (FP8 jobs keep 16-bit
    activations and parameters). The one place this is written."""
    return 4.0 if precision == "fp32" else 2.0


def grad_element_bytes(grads_fp32: bool, param_bytes: float) -> float:
    """Bytes of one gradient element: 4 when gradients are accumulated and reduced in fp32
    (:attr:`Training.grads_in_fp32`), else ``param_bytes`` (the parameter's own element size). The one place this
    is written."""
    return 4.0 if grads_fp32 else param_bytes


#: Megatron-Core's --recompute-modules beyond core attention (selective granularity).
RecomputeModule = Literal["mla_up_proj", "moe_act", "layernorm", "mlp", "moe", "shared_experts"]


class Training(Spec, frozen=True):
    """Per-iteration training settings (Megatron names).

    ``zero_stage`` 1 is Megatron's ``--use-distributed-optimizer`` (optimizer states sharded over data-parallel
    ranks); 2 also shards gradients; 3 also shards parameters (FSDP / ZeRO-3).

    Fields left ``None`` come from the job's framework profile (:class:`~trainsim.spec.framework.Framework`): a
    :class:`~trainsim.spec.job.Job` resolves them, so inside a job every field is concrete. ``attention`` is the
    core-attention *path* (``flash``: FlashAttention-style kernel, causal FLOPs skipped, no s² activations;
    ``unfused``: s² scores with the fused scale-mask-softmax kernel; ``eager``: s² scores with PyTorch's fp32
    softmax chain); given explicitly it overrides the profile's attention backend.
    """

    micro_batch_size: Annotated[int, Flag("--micro-batch-size", "--mbs", dimension="micro_batch_size",
                                          help="micro-batch size (default 1)", unit="sequences")] = Field(
        default=1, gt=0, le=MAX_BATCH)
    global_batch_size: Annotated[int, Flag("--global-batch-size", "--gbs", help="global batch size",
                                           unit="sequences")] = Field(gt=0, le=MAX_BATCH)
    seq_length: Annotated[int | None, Flag("--seq-length", help="training sequence length", unit="tokens")] = Field(
        default=None, gt=0, le=MAX_SEQ_LENGTH, description="None: the model's seq_length")
    recompute_granularity: Annotated[Recompute, Flag("--recompute-granularity", dimension="recompute",
                                                     help="none, selective or full")] = "none"
    recompute_num_layers: Annotated[int | None, Flag("--recompute-num-layers",
                                                     help="layers per stage recomputed (full)")] = Field(
        default=None, gt=0, le=MAX_LAYERS, description="with full recompute: layers per stage recomputed (None: all)"
    )
    zero_stage: Annotated[int | None,
                          Flag("--use-distributed-optimizer", const=1, help="distributed optimizer (ZeRO-1)"),
                          Flag("--zero-stage", dimension="zero_stage", megatron=False, help="ZeRO stage 0-3")] = Field(
        default=None, ge=0, le=3, description="None: the framework's default")
    overlap_grad_reduce: Annotated[bool | None, Flag(
        "--overlap-grad-reduce", help="overlap DP gradient reduction with backward")] = None
    overlap_param_gather: Annotated[bool | None, Flag(
        "--overlap-param-gather", help="overlap parameter all-gather with forward")] = None
    tp_comm_overlap: Annotated[bool | None, Flag("--tp-comm-overlap",
                                                 help="overlap TP communication with GEMMs")] = None
    overlap_p2p_comm: Annotated[bool, Flag(
        "--no-overlap-p2p-communication", const=False, param="no_overlap_p2p_comm",
        help="interleaved schedule: block on pipeline send/recv")] = Field(
        default=True, description="interleaved schedule: overlap pipeline send/recv with compute (Megatron default)"
    )
    precision: Annotated[Precision,
                         Flag("--fp16", const="fp16", help="fp16 mixed precision"),
                         Flag("--bf16", const="bf16", help="bf16 mixed precision (default)"),
                         Flag("--fp8", const="fp8", help="FP8 GEMMs (Transformer Engine)"),
                         Flag("--fp32", const="fp32", megatron=False, help="fp32 training (TF32 GEMMs)")] = "bf16"
    fp8_recipe: Annotated[Literal["delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4"] | None, Flag(
        "--fp8-recipe", help="low-precision GEMM recipe: FP8 delayed, tensorwise, blockwise or mxfp8, or FP4 nvfp4 "
                             "(Blackwell; Megatron's --fp4-recipe nvfp4); implies --fp8")] = Field(
        default=None, description="Transformer Engine's low-precision recipe: FP8 scaling (delayed, tensorwise, "
                                  "blockwise, mxfp8) or NVFP4 (FP4 GEMMs); None: delayed when precision is fp8"
    )
    fp8_param_gather: Annotated[bool, Flag(
        "--fp8-param-gather", help="keep the compute parameters in FP8 and all-gather them in FP8 (needs --fp8 and "
                                   "the distributed optimizer)")] = Field(
        default=False, description="Megatron-Core --fp8-param-gather: the model's compute copy of the parameters is "
                                   "its FP8 weights (no 16-bit copy) and the distributed optimizer all-gathers them "
                                   "in FP8 (1 byte per parameter)")
    recompute_modules: Annotated[tuple[RecomputeModule, ...], Flag(
        "--recompute-modules", help="modules recomputed in backward (comma-separated): mla_up_proj, moe_act, "
                                    "layernorm, mlp, moe, shared_experts (core_attn: --recompute-granularity "
                                    "selective)")] = Field(
        default=(), description="Megatron-Core's --recompute-modules beyond core attention: MLA up-projections and "
                                "expert activations, norms (layernorm: output discarded), and checkpointed dense MLP, "
                                "MoE layer or shared experts (recomputed, collectives included, keeping their input)"
    )
    moe_shared_expert_overlap: Annotated[bool, Flag(
        "--moe-shared-expert-overlap", help="run the shared expert while tokens are dispatched")] = Field(
        default=False, description="run the shared expert while tokens are dispatched")
    moe_a2a_overlap: Annotated[bool, Flag(
        "--overlap-moe-expert-parallel-comm", param="moe_a2a_overlap",
        help="hide the expert all-to-all behind another micro-batch's compute (merged 1F1B / DualPipe)")] = Field(
        default=False,
        description="Megatron's --overlap-moe-expert-parallel-comm / DualPipe: a micro-batch's dispatch and combine "
                    "hide behind another micro-batch's compute",
    )
    moe_token_dispatcher: Annotated[Literal["alltoall", "flex"], Flag(
        "--moe-token-dispatcher-type", param="moe_token_dispatcher",
        help="expert token dispatcher: alltoall (NCCL all-to-all, a copy per chosen expert) or flex (DeepEP / "
             "HybridEP: one copy per destination node over the network, forwarded over NVLink)")] = Field(
        default="alltoall",
        description="Megatron's --moe-token-dispatcher-type: alltoall (an all-to-all of a copy per chosen expert) or "
                    "flex (DeepEP / HybridEP, --moe-flex-dispatcher-backend: a token crosses the network once per "
                    "destination node and is forwarded to that node's experts over NVLink)")
    attention: Annotated[Literal["flash", "unfused", "eager"] | None, Flag(
        "--attention", megatron=False,
        help="core attention path: flash, unfused (fused softmax on s² scores) or eager (fp32 softmax chain)")] = None
    grad_reduce_in_fp32: Annotated[bool | None,
                                   Flag("--grad-reduce-in-bf16", const=False,
                                        help="reduce gradients in 16-bit instead of fp32"),
                                   Flag("--accumulate-allreduce-grads-in-fp32", const=True,
                                        help="accumulate and reduce gradients in fp32")] = Field(
        default=None,
        description="gradient buffer and its reduction in fp32 (None: Megatron's default, fp32 unless fp16 training)",
    )
    optimizer_cpu_offload: Annotated[bool, Flag(
        "--optimizer-cpu-offload",
        help="optimizer states, master weights and step on the host CPU (ZeRO-Offload)")] = Field(
        default=False,
        description="Megatron-Core --optimizer-cpu-offload, DeepSpeed offload_optimizer (ZeRO-Offload): master "
                    "weights, moments and the step of this GPU's optimizer shard held and run on the host CPU")
    optimizer_offload_fraction: Annotated[float, Flag(
        "--optimizer-offload-fraction", help="with --optimizer-cpu-offload: share of the optimizer on the CPU "
                                             "(default 1)")] = Field(
        default=1.0, ge=0.0, le=1.0, description="with optimizer_cpu_offload: the share offloaded (Megatron default 1)")
    param_cpu_offload: Annotated[bool, Flag(
        "--param-cpu-offload", megatron=False,
        help="ZeRO-3 / FSDP: sharded parameters, gradients and the optimizer on the host CPU")] = Field(
        default=False,
        description="DeepSpeed ZeRO-3 offload_param with offload_optimizer, PyTorch FSDP CPUOffload(offload_params="
                    "True) / FSDP2 CPUOffloadPolicy: the parameter and gradient shards live in host memory (copied "
                    "to the GPU before each all-gather, back after each reduce-scatter) and the whole optimizer "
                    "runs on the CPU")
    ddp_bucket_size: Annotated[int | None, Flag(
        "--ddp-bucket-size", help="parameters per data-parallel gradient bucket (default: the framework's)",
        unit="parameters")] = Field(default=None, gt=0, description="parameters per DP bucket (Megatron default)")
    train_tokens: Annotated[float | None, Flag("--train-tokens", megatron=False,
                                               help="tokens to train on (e.g. 300e9)")] = Field(
        default=None, gt=0, le=MAX_TRAIN_TOKENS)

    @property
    def grads_in_fp32(self) -> bool:
        """Whether gradients are accumulated and reduced in fp32 (Megatron turns this on for bf16/fp8)."""
        if self.grad_reduce_in_fp32 is not None:
            return self.grad_reduce_in_fp32
        return self.precision != "fp16"

    @property
    def offloaded_fraction(self) -> float:
        """Share of this GPU's optimizer held and stepped on the host CPU (0 without CPU offloading; all of it when the
        parameters are offloaded)."""
        if self.param_cpu_offload:
            return 1.0
        return self.optimizer_offload_fraction if self.optimizer_cpu_offload else 0.0

    @property
    def use_distributed_optimizer(self) -> bool:
        """Megatron's flag: optimizer states sharded over data parallelism."""
        return (self.zero_stage or 0) >= 1
