"""Training settings: batch, sequence, recomputation, optimizer sharding, overlap, precision."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainsim.spec.base import Spec
from trainsim.spec.limits import MAX_BATCH, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_TRAIN_TOKENS

Recompute = Literal["none", "selective", "full"]
Precision = Literal["fp32", "fp16", "bf16", "fp8"]


def element_bytes(precision: str) -> float:
    """Bytes of one parameter or activation element as trained: 4 in fp32, else 2 (FP8 jobs keep 16-bit
    activations and parameters). The one place this is written."""
    return 4.0 if precision == "fp32" else 2.0


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

    micro_batch_size: int = Field(default=1, gt=0, le=MAX_BATCH)
    global_batch_size: int = Field(gt=0, le=MAX_BATCH)
    seq_length: int | None = Field(default=None, gt=0, le=MAX_SEQ_LENGTH, description="None: the model's seq_length")
    recompute_granularity: Recompute = "none"
    recompute_num_layers: int | None = Field(
        default=None, gt=0, le=MAX_LAYERS, description="with full recompute: layers per stage recomputed (None: all)"
    )
    zero_stage: int | None = Field(default=None, ge=0, le=3, description="None: the framework's default")
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool | None = None
    overlap_p2p_comm: bool = Field(
        default=True, description="interleaved schedule: overlap pipeline send/recv with compute (Megatron default)"
    )
    precision: Precision = "bf16"
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8"] | None = Field(
        default=None, description="FP8 scaling recipe (None: delayed when precision is fp8)"
    )
    recompute_modules: tuple[Literal["mla_up_proj", "moe_act"], ...] = Field(
        default=(), description="Megatron's --recompute-modules subset modelled: MLA up-projections, expert activations"
    )
    moe_shared_expert_overlap: bool = Field(default=False,
                                            description="run the shared expert while tokens are dispatched")
    moe_a2a_overlap: bool = Field(
        default=False,
        description="Megatron's --overlap-moe-expert-parallel-comm / DualPipe: a micro-batch's dispatch and combine "
                    "hide behind another micro-batch's compute",
    )
    attention: Literal["flash", "unfused", "eager"] | None = None
    grad_reduce_in_fp32: bool | None = Field(
        default=None,
        description="gradient buffer and its reduction in fp32 (None: Megatron's default, fp32 unless fp16 training)",
    )
    ddp_bucket_size: int | None = Field(default=None, gt=0, description="parameters per DP bucket (Megatron default)")
    train_tokens: float | None = Field(default=None, gt=0, le=MAX_TRAIN_TOKENS)

    @property
    def grads_in_fp32(self) -> bool:
        """Whether gradients are accumulated and reduced in fp32 (Megatron turns this on for bf16/fp8)."""
        if self.grad_reduce_in_fp32 is not None:
            return self.grad_reduce_in_fp32
        return self.precision != "fp16"

    @property
    def use_distributed_optimizer(self) -> bool:
        """Megatron's flag: optimizer states sharded over data parallelism."""
        return (self.zero_stage or 0) >= 1
