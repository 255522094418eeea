"""GPU memory per pipeline stage, following Megatron-LM's accounting.

1. **Model states** (bytes per parameter, Megatron's distributed-optimizer table, ``d`` = dp·cp):

   ==============================  =============  =================================
   precision                       plain          distributed optimizer (ZeRO-1)
   ==============================  =============  =================================
   16-bit params, 16-bit grads     2 + 2 + 16     2 + 2 + 16/d
   16-bit params, fp32 grads       2 + 4 + 12     2 + 4 + 12/d
   fp32 params, fp32 grads         4 + 4 + 8      4 + 4 + 8/d
   ==============================  =============  =================================

   (Megatron's theoretical table; with a framework profile the fp32 copy of 16-bit gradients is counted where it
   lives, as a transient of the optimizer step, see :func:`main_grad_copy_bytes`). Routed-expert parameters are
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
   (:data:`NCCL_BYTES_PER_GROUP` per communicator the stage uses) and the caching allocator's reserve
   (:data:`FRAGMENTATION` of the dynamic memory: activations and logits). The reserve is released before the
   allocator reports out of memory, so it makes a plan *tight* but not unfit (:func:`device_peak`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, computed_field

from trainsim.spec.training import element_bytes, grad_element_bytes
from trainsim.workload import fusion as fz
from trainsim.workload.fp8 import recipe_cost
from trainsim.workload.layers import Shard, expert_rows, sac_matmuls, shard_of
from trainsim.workload.memo import per_job
from trainsim.workload.sharding import sharding_of
from trainsim.workload.stages import stage_layer_counts

if TYPE_CHECKING:
    from trainsim.spec.framework import Framework
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model

# Defaults of the allowance; a job's framework profile gives its own (cuda_context_bytes, nccl_bytes_per_group,
# allocator_fragmentation).
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
    optimizer_step_bytes: float = 0.0  # temporaries of the optimizer step (activations are freed by then)
    allocator_reserve_bytes: float = 0.0  # the caching allocator's reserve, part of other_bytes

    @property
    def required_bytes(self) -> float:
        """The peak that must be resident: :attr:`total_bytes` without the caching allocator's reserve.

        PyTorch's caching allocator frees its unused cached blocks and retries before it reports out of memory
        (``release_cached_blocks`` in ``c10/cuda/CUDACachingAllocator.cpp``), so the reserve fills what is free but
        does not decide whether a plan fits: a plan fits when this does (:func:`device_peak`)."""
        return self.total_bytes - self.allocator_reserve_bytes

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> float:
        """Peak: the model states and allowance plus the larger of the forward/backward activations and the
        optimizer step's temporaries (they are never alive together)."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.other_bytes
                + max(self.activations_bytes, self.optimizer_step_bytes))

    @property
    def allocated_bytes(self) -> float:
        """The peak of tensor allocations alone (what ``torch.cuda.max_memory_allocated`` reports): the total
        without the CUDA context, NCCL buffers and the allocator's reserve."""
        return self.total_bytes - self.other_bytes


def bytes_per_param(precision: str, zero_stage: int, shards: int,
                    grads_fp32: bool | None = None, fp8_recipe: str | None = None,
                    framework: Framework | None = None, fp8_params: bool = False,
                    fp32_grad_buffer: bool = False) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter after ZeRO sharding over ``shards`` ranks (FP8: plus the
    recipe's FP8 weight copies).

    With a ``framework``, the optimizer holds its master weights (``main_params_dtype``; none when the optimizer
    updates the parameters themselves) and its two moments (``exp_avg_dtype``, ``exp_avg_sq_dtype``); the fp32
    copy of 16-bit gradients exists only during the step (:func:`main_grad_copy_bytes`). Without one, Megatron's
    theoretical table above (which counts that copy as resident). ``fp32_grad_buffer``: the 16-bit gradients and a
    whole fp32 buffer they are added into after every backward (DeepSpeed's ``BF16_Optimizer``).
    """
    if grads_fp32 is None:
        grads_fp32 = precision != "fp16"
    if framework is not None:
        w = framework.param_bytes(precision)
        g = grad_element_bytes(grads_fp32, w) + (4.0 if fp32_grad_buffer else 0.0)
        o = framework.master_bytes(precision) + framework.state_bytes()
    elif precision == "fp32":
        w, g, o = 4.0, 4.0, 8.0
    elif grads_fp32:  # 16-bit params, fp32 grads: fp32 main params + Adam moments
        w, g, o = 2.0, 4.0, 12.0
    else:  # 16-bit params and grads: the optimizer also keeps fp32 main grads
        w, g, o = 2.0, 2.0, 16.0
    if precision == "fp8":
        # the FP8 weight copies; with --fp8-param-gather they are the model's only compute copy
        w = recipe_cost(fp8_recipe).weight_copy_bytes + (0.0 if fp8_params else w)
    if zero_stage >= 1:
        o /= shards
    if zero_stage >= 2:
        g /= shards
    if zero_stage >= 3:
        w /= shards
    return w, g, o


def main_grad_copy_bytes(framework: Framework, precision: str, grads_fp32: bool | None) -> float:
    """Bytes per (local) parameter of the fp32 gradient copy the optimizer makes at its step.

    With 16-bit gradients and fp32 master weights, Megatron's optimizers set ``main_param.grad =
    model_grad.float()`` just before the step (``_copy_model_grads_to_main_grads`` in
    ``megatron/core/optimizer/{optimizer,distrib_optimizer}.py``; DeepSpeed ZeRO-1/2 likewise builds the fp32
    gradient partition at the step) and ``zero_grad(set_to_none=True)`` frees it before the next forward pass: a
    step transient, not a resident state. With fp32 gradients ``.float()`` is a view (no copy)."""
    if grads_fp32 is None:
        grads_fp32 = precision != "fp16"
    return 4.0 if framework.master_bytes(precision) == 4.0 and not grads_fp32 else 0.0


def layer_activation_bytes(model: Model, shard: Shard, moe: bool = False) -> float:
    """Activation bytes one layer keeps for one micro-batch until its backward pass, on one GPU of ``shard``.

    The shard gives the micro-batch, the sequence and its split (tp, cp, sequence parallelism, expert tensor
    parallelism ``etp``), the element sizes (activations; a saved linear-layer input element is
    :attr:`~trainsim.workload.layers.Shard.saved_input_bytes`), the recompute mode and modules, the attention path
    (``flash``, ``unfused``, ``eager``) and the stack's elementwise fusions. MLA keeps its latents and the
    up-projected Q/K/V (the latter recomputed instead with ``mla_up_proj`` in ``recompute_modules``); an MoE layer
    keeps the router probabilities, the permuted expert inputs of the busiest rank, the expert FC1 output and FC2
    input (``moe_act`` recomputes the activation instead of keeping the FC2 input), the expert outputs for the
    routing-weight gradient, and the shared expert's tensors. Megatron-Core's other ``--recompute-modules``: a
    checkpointed dense MLP (``mlp``), MoE layer (``moe``) or shared expert (``shared_experts``) keeps only its input,
    ``layernorm`` discards the output of a norm that is its own module (MLA's input norm). Eager RMSNorm keeps its
    fp32 input and normalised output, eager SwiGLU its SiLU output, the transformers layout the attention kernel's
    output beside the projection's contiguous copy of it; dropout masks only where the stack runs dropout.
    """
    fusion, tp, recompute, attention = shard.fusion, shard.tp, shard.recompute, shard.attention
    recompute_modules, etp = shard.recompute_modules, shard.etp
    s = shard.seq // shard.cp
    b, h, d = shard.micro_batch, model.hidden_size, model.head_dim
    e = shard.act_bytes
    q = shard.saved_input_bytes
    sp = shard.sequence_parallel and tp > 1
    rep = tp if sp else 1  # divisor of tensors replicated across TP ranks unless sequence parallel
    sbh = s * b * h
    if recompute == "full":
        return e * sbh / rep
    if shard.op_sac(model, moe):
        return op_sac_saved_bytes(model, shard)
    heads, groups = model.num_attention_heads / tp, model.query_groups / tp
    hd = 1.0 if model.hidden_dropout > 0 and fusion.dropout else 0.0
    ad = model.attention_dropout > 0 and fusion.dropout
    sb = s * b
    # attention block
    if model.multi_latent_attention:
        qr, kvr, rope, vd = model.q_lora_rank or 0, model.kv_lora_rank, model.qk_pos_emb_head_dim, model.v_dim
        total = e * sbh / rep  # norm input
        if "layernorm" not in recompute_modules:  # the norm's output, the down-projections' input (gathered:
            total += q * sbh  # they are replicated over TP); discarded and recomputed with layernorm
        total += (e + q) * sb * (qr + kvr) + e * sb * rope  # latents and their norms
        if "mla_up_proj" not in recompute_modules:
            total += e * sb * heads * (2 * d + vd)  # Q, K (with RoPE parts) and V of the local heads
        total += q * sb * heads * vd  # projection input
    else:
        vd = d
        total = (e + q) * sbh / rep  # norm input, QKV input
        total += e * sb * (heads + groups) * d  # Q, K
        total += e * sb * groups * d  # V
        total += q * sb * heads * d  # projection input (attention output)
    total += hd * sbh / rep  # dropout mask after the projection
    if attention != "flash":
        if recompute != "selective":
            scores = heads * s * s * b
            # softmax output (fp32 + 16-bit copy on the eager path), dropout output and mask
            total += scores * (fz.softmax_saved_bytes(attention, e) + (e + 1 if ad else 0))
    else:
        total += 4.0 * b * heads * s  # softmax log-sum-exp (fp32)
        if fusion.attention_output_copy:  # the kernel's saved output beside the projection's contiguous input
            total += e * sb * heads * vd
    # two eager RMSNorms: each keeps its fp32 input and the normalised 16-bit tensor instead of its input
    total += 2 * fz.eager_norm_saved_bytes(fusion, model.normalization == "RMSNorm") * sbh / rep
    # MLP block
    total += e * sbh / rep  # norm input
    mult = 2 if model.swiglu else 1
    if moe and "moe" in recompute_modules:
        total += e * sbh / rep  # the checkpointed MoE layer keeps only its input (the pre-MLP norm's output)
    elif moe:
        etp_ = tp if etp is None else etp
        copies, rows = expert_rows(model, sb, tp, etp_)
        total += 2 * 4.0 * sb / tp * (model.num_experts or 0)  # router logits and probabilities (fp32)
        f = model.expert_ffn_size / etp_
        total += q * rows * h  # permuted expert input (after the expert-TP all-gather)
        total += e * rows * mult * f  # FC1 output = activation input
        if "moe_act" not in recompute_modules:
            total += q * rows * f  # FC2 input
        total += e * copies * h  # expert outputs for the routing-weight gradient
        shared = model.moe_shared_expert_intermediate_size or 0
        if shared and "shared_experts" not in recompute_modules:  # checkpointed: nothing beyond its input
            total += q * sbh / rep + e * sb * mult * shared / tp + q * sb * shared / tp
    elif "mlp" not in recompute_modules:  # a checkpointed dense MLP keeps only its input (the norm input above)
        total += q * sbh / rep  # FC1 input
        total += e * sb * mult * model.ffn_size / tp + q * sb * model.ffn_size / tp
        if model.swiglu and not fusion.bias_activation:  # eager silu(gate) * up keeps the SiLU output too
            total += e * sb * model.ffn_size / tp
    total += hd * sbh / rep
    return total


def op_sac_saved_bytes(model: Model, shard: Shard) -> float:
    """What a dense layer keeps under op-level selective checkpointing (torchtitan ``selective_ac_option='op'``):
    the checkpointed layer input, the outputs of the saved matmuls (:func:`~trainsim.workload.layers.sac_matmuls`),
    the attention output with its log-sum-exp, and the reduce-scatter outputs of sequence-parallel TP (in
    ``_save_list``); everything else is recomputed in backward."""
    tp, e = shard.tp, shard.act_bytes
    s = shard.seq // shard.cp
    sb = s * shard.micro_batch
    sp = shard.sequence_parallel and tp > 1
    rep = tp if sp else 1
    h = model.hidden_size
    heads = model.num_attention_heads / tp
    total = e * sb * h / rep  # the checkpointed layer input
    total += sum(e * sb * n for _name, n, _k, saved in sac_matmuls(model, shard) if saved)
    if shard.attention == "flash":
        total += e * sb * heads * model.v_dim + 4.0 * shard.micro_batch * heads * s  # output and log-sum-exp
    if sp:
        total += 2 * e * sb * h / tp  # the two reduce-scatter outputs
    return total


def embedding_dropout_bytes(model: Model, shard: Shard) -> float:
    """The embedding dropout mask of one micro-batch on the first stage (0 where the stack runs no dropout)."""
    if not (model.hidden_dropout > 0 and shard.fusion.dropout):
        return 0.0
    tokens = shard.micro_batch * shard.seq / shard.cp
    return tokens * model.hidden_size / (shard.tp if shard.sequence_parallel else 1)


def logits_bytes(model: Model, shard: Shard) -> float:
    """The logits of one micro-batch and their loss chain (:func:`~trainsim.workload.fusion.logits_memory_bytes`)
    on one GPU of the last stage, until the micro-batch's backward pass."""
    tokens = shard.micro_batch * shard.seq / shard.cp
    vocab = model.padded_vocab_size(shard.tp) / shard.tp
    return tokens * vocab * fz.logits_memory_bytes(shard.fusion, shard.act_bytes)


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
        if model.position_embedding_type == "learned_absolute":  # replicated over 1D TP; a block of it per GPU on
            params += model.seq_length * model.hidden_size / (tp if par.summa else 1)  # the grid ([s/R, h/C])
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


@per_job
def _param_bytes(job: Job) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(weights, gradients, optimizer) bytes per parameter of ``job``: non-expert, then routed-expert parameters."""
    tr, fw = job.training, job.framework
    stage = sharding_of(job).memory_stage
    shards = sharding_of(job).shards  # dp·cp, or the ranks of a node under hybrid sharding
    fp8p = tr.fp8_param_gather
    buf = job.bf16_optimizer
    dense = bytes_per_param(tr.precision, stage, shards, tr.grads_in_fp32, tr.fp8_recipe, fw, fp8p, buf)
    # expert weights are sharded by the distributed optimizer over the expert-data-parallel group only
    expert = bytes_per_param(tr.precision, stage, job.expert_dp, tr.grads_in_fp32, tr.fp8_recipe, fw, fp8p, buf)
    return dense, expert


@per_job
def _layer_activations(job: Job) -> dict[tuple[bool, str], float]:
    """:func:`layer_activation_bytes` of one micro-batch for every (is MoE, recompute mode) layer kind of ``job``
    (and each kind without recompute: the working set of a layer being recomputed). Read-only for callers."""
    shard = shard_of(job)
    kinds = {kind for stage in range(job.parallelism.pp) for kind in stage_layer_counts(job, stage)}
    kinds |= {(is_moe, "none") for is_moe, _mode in kinds}
    return {(is_moe, mode): layer_activation_bytes(job.model, shard.with_recompute(mode), is_moe)
            for is_moe, mode in kinds}


def stage_memory(job: Job, stage: int) -> StageMemory:
    """Peak memory of one GPU of ``stage``."""
    model, par, tr = job.model, job.parallelism, job.training
    tp, pp, cp = par.tp, par.pp, par.cp
    b, seq = tr.micro_batch_size, job.seq_length
    e = element_bytes(tr.precision)
    dense, expert = stage_parameter_split(job, stage)
    sh = sharding_of(job)
    fw = job.framework
    shard = shard_of(job)  # one micro-batch on one GPU of this job: sizes, split, element bytes, recompute
    (w, g, o), (we, ge, oe) = _param_bytes(job)
    weights = dense * w + expert * we
    gradients = dense * g + expert * ge
    optimizer = dense * o + expert * oe
    # the layers gathered at once under ZeRO-3 (FSDP's SHARD_GRAD_OP holds every one: stage 2's whole weights)
    if sh.per_microbatch_gather and sh.zero_stage >= 3:
        if tr.param_cpu_offload:  # the parameter shards live on the host: only the gathered working set is here
            weights = 0.0
        weights += sh.gathered_params(model.layer_params / tp, dense + expert) * sh.param_bytes

    q = shard.saved_input_bytes
    per_mb = 0.0
    full_layer = 0.0
    acts = _layer_activations(job)
    for (is_moe, mode), count in stage_layer_counts(job, stage).items():
        per_mb += count * acts[(is_moe, mode)]
        if mode == "full":  # the layer being recomputed holds its whole working set during its backward
            full_layer = max(full_layer, acts[(is_moe, "none")])
        elif shard.with_recompute(mode).op_sac(model, is_moe):  # and what op-level checkpointing recomputes
            full_layer = max(full_layer, acts[(is_moe, "none")] - acts[(is_moe, mode)])
    tokens = b * seq / cp
    if stage == 0:
        per_mb += embedding_dropout_bytes(model, shard)
    if stage == job.head_stage and model.mtp_num_layers:  # MTP: its layer, the 2h-wide projection input, norms
        mtp = layer_activation_bytes(model, shard, model.is_moe)
        per_mb += model.mtp_num_layers * (mtp + (2 * q + 4 * e) * tokens * model.hidden_size)
    schedule = job.pipeline
    inflight = schedule.in_flight(stage, pp, job.num_microbatches, par.vpp)
    activations = per_mb * inflight + full_layer
    if par.summa:  # the gathered keys/values and panel buffers of the layer in flight
        from trainsim.workload.summa import workspace_bytes

        activations += workspace_bytes(model, shard)
    head = job.head_stage
    if stage == head:  # logits and the loss chain (fz.logits_memory_bytes) until each micro-batch's backward
        activations += (logits_bytes(model, shard) * schedule.logits_held(job.num_microbatches)
                        * (1 + model.mtp_num_layers))  # each MTP depth has its own logits
    groups = sum(1 for size in (tp, cp, par.ep, job.dp, pp) if size > 1)
    if head != 0 and stage in (0, head) and not model.untie_embeddings_and_output_weights:
        groups += 1  # embedding group
    reserve = fw.allocator_fragmentation * activations
    other = fw.cuda_context_bytes + fw.nccl_bytes_per_group * groups + reserve
    # the optimizer step's temporaries over the local (sharded) parameters: foreach AdamW's denominators and the
    # fp32 copy of 16-bit gradients (none where the BF16_Optimizer's fp32 buffer is resident)
    local = (dense / (job.dp * cp) + expert / job.expert_dp) if sh.memory_stage >= 1 else dense + expert
    copy = 0.0 if job.bf16_optimizer else main_grad_copy_bytes(fw, tr.precision, tr.grads_in_fp32)
    step = local * (fw.step_transient_bytes() + copy)
    # CPU optimizer offloading: the offloaded share's master weights, moments and step live on the host, and with
    # sharded gradients (ZeRO-2/3) so does that share's gradient partition (DeepSpeed's offloaded fp32 partition)
    kept = 1.0 - tr.offloaded_fraction
    optimizer *= kept
    step *= kept
    if sh.memory_stage >= 2:
        gradients *= kept
    return StageMemory(stage=stage, weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer,
                       activations_bytes=activations, other_bytes=other, optimizer_step_bytes=step,
                       allocator_reserve_bytes=reserve)


#: A plan whose peak is within this fraction of the GPU's capacity "fits, tight": allocator fragmentation, NCCL
#: buffers or a longer sequence can push it over, so search ranks it after plans with headroom.
TIGHT_MARGIN = 0.10


def is_tight(peak_bytes: float, capacity_bytes: float) -> bool:
    """Whether a plan that fits leaves less than :data:`TIGHT_MARGIN` of the capacity free."""
    return (1.0 - TIGHT_MARGIN) * capacity_bytes < peak_bytes <= capacity_bytes


def device_peak(stages: Sequence[StageMemory], capacity_bytes: float) -> tuple[float, bool, bool]:
    """``(peak_bytes, fits, tight)`` of a plan on a GPU of ``capacity_bytes``.

    A plan fits when what must be resident (:attr:`StageMemory.required_bytes`, the peak without the allocator's
    reserve) fits: the caching allocator releases its cache before failing. Its peak is then the full peak with the
    reserve, but no more than the device holds (the cache only fills free memory); a plan that fits is **tight** when
    that full peak is within :data:`TIGHT_MARGIN` of the capacity. A plan that does not fit reports its full peak.
    """
    total = max(s.total_bytes for s in stages)
    fits = max(s.required_bytes for s in stages) <= capacity_bytes
    peak = min(total, capacity_bytes) if fits else total
    return peak, fits, fits and total > (1.0 - TIGHT_MARGIN) * capacity_bytes


def memory_per_stage(job: Job) -> list[StageMemory]:
    """Peak memory of every pipeline stage."""
    return [stage_memory(job, s) for s in range(job.parallelism.pp)]
