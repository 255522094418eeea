"""GPU memory per pipeline stage, following Megatron-LM's accounting.

1. **Model states** (bytes per parameter, Megatron's distributed-optimizer table, ``d`` = dp·cp):

   ==============================  =============  =================================
   precision                       plain          distributed optimizer (ZeRO-1)
   ==============================  =============  =================================
   16-bit params, 16-bit grads     2 + 2 + 16     2 + 2 + 16/d
   16-bit params, fp32 grads       2 + 4 + 12     2 + 4 + 12/d
   fp32 params, fp32 grads         4 + 4 + 8      4 + 4 + 8/d
   ==============================  =============  =================================

   (with 16-bit gradients the optimizer keeps an fp32 copy of its gradient shard). Routed-expert parameters are
   sharded over the expert-data-parallel group instead (``tp·cp·dp/(ep·etp)`` ranks), as Megatron-Core's distributed
   optimizer does with its expert-parallel buffers. ZeRO-2 also shards the gradients,
   ZeRO-3 the parameters (plus two gathered layers in flight). FP8 keeps a 1-byte copy of the weights next to the
   16-bit ones.
2. **Activations** per layer and micro-batch, tensor by tensor as in Korthikanti et al. (2022): for a GPT layer with
   4h FFN, dropout and 16-bit activations this is ``sbh(10 + 24/t + 5as/(ht))`` bytes without sequence parallelism,
   ``sbh(34 + 5as/h)/t`` with it, ``34sbh/t`` with selective recomputation, and ``2sbh/t`` per layer with full
   recomputation (plus one layer's full activations while it is recomputed). FlashAttention never stores the
   ``s×s`` scores. Context parallelism divides ``s`` by ``cp``.
3. **In-flight micro-batches** of the schedule for the stage: 1F1B keeps ``min(p − i, m)``, GPipe ``m``, interleaved
   1F1B ``(p − i − 1)·2 + (v − 1)·p + 1`` model chunks (Megatron's warm-up count plus one).
4. **Embedding and output layer**: the first stage holds the input embedding and its dropout mask; the last stage
   the LM head (a copy of the embedding when tied and pp > 1) and one micro-batch of logits (16-bit plus an fp32 copy
   for the cross-entropy).
5. **Allowance** (``other_bytes``): CUDA context and library workspaces (:data:`CUDA_CONTEXT_BYTES`), NCCL buffers
   (:data:`NCCL_BYTES_PER_GROUP` per communicator the stage uses) and allocator fragmentation
   (:data:`FRAGMENTATION` of the dynamic memory: activations and logits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, computed_field

from trainsim.spec.training import element_bytes, saved_input_bytes
from trainsim.workload.sharding import sharding_of
from trainsim.workload.stages import stage_layer_counts

if TYPE_CHECKING:
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model

CUDA_CONTEXT_BYTES = 0.75e9
NCCL_BYTES_PER_GROUP = 0.15e9
FRAGMENTATION = 0.08


class StageMemory(BaseModel):
    """Peak memory of one GPU of a pipeline stage, in bytes."""

    model_config = ConfigDict(frozen=True)

    stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> float:
        """Sum of all parts."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.other_bytes)


def bytes_per_param(precision: str, zero_stage: int, shards: int,
                    grads_fp32: bool | None = None) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter after ZeRO sharding over ``shards`` ranks."""
    if grads_fp32 is None:
        grads_fp32 = precision != "fp16"
    if precision == "fp32":
        w, g, o = 4.0, 4.0, 8.0
    elif grads_fp32:  # 16-bit params, fp32 grads: fp32 main params + Adam moments
        w, g, o = 2.0, 4.0, 12.0
    else:  # 16-bit params and grads: the optimizer also keeps fp32 main grads
        w, g, o = 2.0, 2.0, 16.0
    if precision == "fp8":
        w += 1.0
    if zero_stage >= 1:
        o /= shards
    if zero_stage >= 2:
        g /= shards
    if zero_stage >= 3:
        w /= shards
    return w, g, o


def layer_activation_bytes(model: Model, micro_batch: int, seq: int, tp: int, cp: int, sequence_parallel: bool,
                           recompute: str, attention: str, act_bytes: float = 2.0, moe: bool = False,
                           gemm_input_bytes: float | None = None) -> float:
    """Activation bytes one layer keeps for one micro-batch until its backward pass.

    ``gemm_input_bytes`` is the size of a saved linear-layer input element (1 with FP8, else ``act_bytes``).
    """
    s = seq // cp
    b, h, d = micro_batch, model.hidden_size, model.head_dim
    e = act_bytes
    q = e if gemm_input_bytes is None else gemm_input_bytes
    sp = sequence_parallel and tp > 1
    rep = tp if sp else 1  # divisor of tensors replicated across TP ranks unless sequence parallel
    sbh = s * b * h
    if recompute == "full":
        return e * sbh / rep
    heads, groups = model.num_attention_heads / tp, model.query_groups / tp
    hd = 1.0 if model.hidden_dropout > 0 else 0.0
    ad = model.attention_dropout > 0
    # attention block
    total = (e + q) * sbh / rep  # norm input, QKV input
    total += e * s * b * (heads + groups) * d  # Q, K
    total += e * s * b * groups * d  # V
    total += q * s * b * heads * d  # projection input (attention output)
    total += hd * sbh / rep  # dropout mask after the projection
    if attention == "unfused":
        if recompute != "selective":
            scores = heads * s * s * b
            total += scores * (e + (e + 1 if ad else 0))  # softmax output, dropout output and mask
    else:
        total += 4.0 * b * heads * s  # softmax log-sum-exp (fp32)
    # MLP block
    total += (e + q) * sbh / rep if not moe else e * sbh / rep  # norm input, FC1 input
    if moe:
        tokens = s * b * model.moe_router_topk
        up = (2 if model.swiglu else 1) * model.expert_ffn_size / tp
        total += q * tokens * h  # permuted expert input
        total += e * tokens * up + q * tokens * model.expert_ffn_size / tp  # activation input, FC2 input
    else:
        up = (2 if model.swiglu else 1) * model.ffn_size / tp
        total += e * s * b * up + q * s * b * model.ffn_size / tp
    total += hd * sbh / rep
    return total


def in_flight_microbatches(schedule: str, stage: int, pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Micro-batches (in units of a whole stage's layers) whose activations a stage holds at its peak (owned by the
    schedule: :meth:`~trainsim.schedule.pipeline.PipelineSchedule.in_flight`)."""
    from trainsim.schedule import get_schedule

    return get_schedule(schedule).in_flight(stage, pp, num_microbatches, vpp)


def stage_parameters(job: Job, stage: int) -> float:
    """Parameters held by one GPU of ``stage`` (after tensor and expert parallelism, before ZeRO)."""
    dense, expert = stage_parameter_split(job, stage)
    return dense + expert


def stage_parameter_split(job: Job, stage: int) -> tuple[float, float]:
    """(non-expert, expert) parameters held by one GPU of ``stage``.

    Non-expert parameters are split by tensor parallelism (norms and MLA down-projections replicated) and replicated
    over the dp·cp ranks; routed-expert parameters are split by expert parallelism and the expert tensor-parallel size
    ``etp`` and replicated over the expert-data-parallel group of ``dp·cp·tp/(ep·etp)`` ranks (Megatron's parallel
    folding). Shared experts and routers belong to the non-expert part. The last stage also holds the
    multi-token-prediction modules.
    """
    model, par = job.model, job.parallelism
    tp, ep, etp = par.tp, par.ep, par.expert_tp
    norm = model.hidden_size * (2 if model.normalization == "LayerNorm" else 1)
    attn = (model.attention_params - model.attention_replicated_params) / tp + model.attention_replicated_params
    dense_mlp = (model.dense_mlp_params - norm) / tp + norm
    moe_rest = (model.shared_expert_params + model.router_params) / tp + norm
    routed = (model.num_experts or 0) * model.expert_params / (ep * etp)
    counts = stage_layer_counts(job, stage)
    layers = sum(counts.values())
    moe_layers = sum(n for (is_moe, _mode), n in counts.items() if is_moe)
    params = layers * attn + (layers - moe_layers) * dense_mlp + moe_layers * moe_rest
    expert = moe_layers * routed
    v_h = model.padded_vocab_size(tp) * model.hidden_size / tp
    if stage == 0:
        params += v_h
        if model.position_embedding_type == "learned_absolute":
            params += model.seq_length * model.hidden_size
    head = job.head_stage
    if stage == head:
        params += norm
        if model.untie_embeddings_and_output_weights or head != 0:
            params += v_h
        if model.mtp_num_layers:
            h = model.hidden_size
            mtp_mlp = (moe_rest if model.is_moe else dense_mlp)
            params += model.mtp_num_layers * (3 * norm + 2 * h * h / tp + attn + mtp_mlp)
            expert += model.mtp_num_layers * (routed if model.is_moe else 0.0)
    return params, expert


def stage_memory(job: Job, stage: int) -> StageMemory:
    """Peak memory of one GPU of ``stage``."""
    model, par, tr = job.model, job.parallelism, job.training
    tp, pp, cp = par.tp, par.pp, par.cp
    b, seq = tr.micro_batch_size, job.seq_length
    e = element_bytes(tr.precision)
    sp = job.sequence_parallel
    dense, expert = stage_parameter_split(job, stage)
    sh = sharding_of(job)
    w, g, o = bytes_per_param(tr.precision, sh.memory_stage, job.dp * cp, tr.grads_in_fp32)
    # expert weights are sharded by the distributed optimizer over the expert-data-parallel group only
    we, ge, oe = bytes_per_param(tr.precision, sh.memory_stage, job.expert_dp, tr.grads_in_fp32)
    weights = dense * w + expert * we
    gradients = dense * g + expert * ge
    optimizer = dense * o + expert * oe
    if sh.per_microbatch_gather:  # gathered layers in flight: the current one and those prefetched
        weights += (1 + sh.prefetch_depth) * model.layer_params / tp * sh.param_bytes

    q = saved_input_bytes(tr.precision)
    per_mb = 0.0
    full_layer = 0.0
    for (is_moe, mode), count in stage_layer_counts(job, stage).items():
        per_mb += count * layer_activation_bytes(model, b, seq, tp, cp, sp, mode, tr.attention, e, is_moe, q)
        if mode == "full":  # the layer being recomputed holds its whole working set during its backward
            full_layer = max(full_layer, layer_activation_bytes(model, b, seq, tp, cp, sp, "none", tr.attention, e,
                                                                is_moe, q))
    tokens = b * seq / cp
    if stage == 0 and model.hidden_dropout > 0:
        per_mb += tokens * model.hidden_size / (tp if sp else 1)  # embedding dropout mask
    schedule = job.pipeline
    inflight = schedule.in_flight(stage, pp, job.num_microbatches, par.vpp)
    activations = per_mb * inflight + full_layer
    head = job.head_stage
    if stage == head:  # logits (16-bit and the fp32 copy of the cross-entropy) until each micro-batch's backward
        vocab = model.padded_vocab_size(tp) / tp
        activations += tokens * vocab * (e + 4.0) * schedule.logits_held(job.num_microbatches)
    groups = sum(1 for size in (tp, cp, par.ep, job.dp, pp) if size > 1)
    if head != 0 and stage in (0, head) and not model.untie_embeddings_and_output_weights:
        groups += 1  # embedding group
    other = CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_GROUP * groups + FRAGMENTATION * activations
    return StageMemory(stage=stage, weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer,
                       activations_bytes=activations, other_bytes=other)


def memory_per_stage(job: Job) -> list[StageMemory]:
    """Peak memory of every pipeline stage."""
    return [stage_memory(job, s) for s in range(job.parallelism.pp)]
