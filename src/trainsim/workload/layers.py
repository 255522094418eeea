"""The work of one micro-batch on one GPU: a transformer layer, the input embedding and the output head.

Shapes follow Megatron-LM's tensor-parallel layout (column-parallel QKV/FC1, row-parallel projection/FC2), with
sequence parallelism (norms and dropouts on s/tp tokens, all-gather / reduce-scatter instead of all-reduce), context
parallelism (s/cp local queries attending to all keys through a KV ring), GQA, SwiGLU and mixture of experts.
Activations are 16-bit (fp32 for ``precision='fp32'``); with ``precision='fp8'`` GEMMs run in FP8 and pay
activation casts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from trainsim.parallel.layout import placements_of
from trainsim.spec.training import element_bytes
from trainsim.workload import fusion as fz
from trainsim.workload.fp8 import PER_TENSOR_FP8_RECIPES, recipe_cost, saved_input_bytes
from trainsim.workload.fusion import DEFAULT_FUSION, Fusion, fusion_of
from trainsim.workload.memo import per_job
from trainsim.workload.ops import (
    LOW_PRECISION,
    Collective,
    CommOp,
    ComputeOp,
    GemmLayout,
    Group,
    Overlap,
    Phase,
    attention,
    elementwise,
    gemm,
    gemm_with_grads,
)
from trainsim.workload.routing import network_copy_ratio

if TYPE_CHECKING:
    from trainsim.spec.framework import FlashKernel, Fp8TpGather, MoeExpertLaunch, SelectiveRecompute
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model


#: A linear layer's forward, data-gradient and weight-gradient GEMMs.
Linear = tuple[ComputeOp, ComputeOp, ComputeOp]


@dataclass(frozen=True, slots=True)
class Shard:
    """How one micro-batch is split on one GPU."""

    micro_batch: int
    seq: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    precision: str = "bf16"
    attention: str = "flash"  # flash | unfused (fused softmax on s² scores) | eager (fp32 softmax chain)
    recompute: str = "none"
    fusion: Fusion = DEFAULT_FUSION  # the stack's elementwise fusions (trainsim.workload.fusion)
    etp: int | None = None  # expert tensor-parallel size (None: tp)
    fp8_recipe: str | None = None
    recompute_modules: tuple[str, ...] = ()
    moe_shared_expert_overlap: bool = False
    moe_a2a_overlap: bool = False
    summa: bool = False  # 2D tensor parallelism: linear layers on a tp_rows × tp/tp_rows SUMMA grid
    tp_rows: int = 1
    summa_blocks: int = 1
    cp_comm: str = "p2p"  # context-parallel attention: p2p (ring under the kernel), allgather, a2a (exposed), a2a+p2p
    cp_a2a: int = 1  # a2a+p2p: the all-to-all level's size (Job.cp_levels; plain a2a: all cp ranks)
    async_tp: bool = True  # backward TP collectives of column-parallel linears under the wgrad/dgrad GEMMs
    selective: SelectiveRecompute = "core_attention"  # what "selective" recomputes: Megatron's core attention or
    # torchtitan's op-level checkpointing ("op")
    moe_expert_launch: MoeExpertLaunch = "cpp_loop"  # how the local experts are issued (Framework)
    flash_kernel: FlashKernel = "cudnn"  # the flash attention kernel library (Framework.flash_kernel)
    moe_dispatcher: str = "alltoall"  # alltoall (a copy per expert) or flex (DeepEP/HybridEP: a copy per node)
    ep_nodes: int = 1  # nodes the expert-parallel group spans (the flex dispatcher's network copies)
    fp8_tp_gather: Fp8TpGather = "none"  # FP8 sequence-parallel all-gathers of the stack (Framework.fp8_tp_gather)

    def op_sac(self, model: Model, moe: bool) -> bool:
        """Whether a layer of ``model`` runs op-level selective checkpointing (dense, non-MLA layers under a stack
        whose ``selective`` means it); other layers keep Megatron's core-attention recompute."""
        return (self.recompute == "selective" and self.selective == "op"
                and not (moe or model.multi_latent_attention))

    @property
    def tp_cols(self) -> int:
        """Columns of the tensor-parallel grid (tp in 1D mode)."""
        return self.tp // self.tp_rows

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel size of the expert layers."""
        return self.etp if self.etp is not None else self.tp

    @property
    def tokens(self) -> int:
        """Tokens of the micro-batch on this GPU's context-parallel rank (GEMM rows)."""
        return self.micro_batch * self.seq // self.cp

    @property
    def elementwise_tokens(self) -> int:
        """Tokens handled by norms/dropouts: split over tp with sequence parallelism."""
        sp = self.sequence_parallel and self.tp > 1
        return self.tokens // self.tp if sp else self.tokens

    @property
    def gemm_dtype(self) -> str:
        """Data type of the GEMMs (the recipe's for low-precision training: fp8, or fp4 under NVFP4)."""
        if self.precision == "fp8":
            return recipe_cost(self.fp8_recipe).gemm_dtype
        return "tf32" if self.precision == "fp32" else self.precision

    @property
    def act_bytes(self) -> float:
        """Bytes per activation element."""
        return element_bytes(self.precision)

    def tp_gather_bytes(self, backward_grad: bool = False) -> float:
        """Bytes per element of a sequence-parallel all-gather: 1 where the stack gathers the FP8 tensor (the
        column-parallel inputs and their re-gather under ``forward``; with ``backward_grad``, the row-parallel output
        gradients, only under ``both``), else the activation size."""
        fp8 = self.fp8_tp_gather == "both" or (self.fp8_tp_gather == "forward" and not backward_grad)
        return 1.0 if fp8 else self.act_bytes

    @property
    def saved_input_bytes(self) -> float:
        """Bytes per element of a linear-layer input saved for the backward pass (FP8: the recipe's copies)."""
        return saved_input_bytes(self.precision, self.fp8_recipe)

    def with_recompute(self, recompute: str) -> Shard:
        """This shard with another recompute mode (layers of one stage may differ: ``--recompute-num-layers``)."""
        return self if recompute == self.recompute else _with_recompute(self, recompute)

    def p2p_bytes(self, hidden_size: int) -> float:
        """Bytes of one pipeline transfer (activation or its gradient) of this micro-batch: ``tokens·h/tp``
        elements per GPU, each TP rank sending its share. A sequence-parallel tensor is split already; the
        replicated hidden states are split by the sender and all-gathered by the receiver, by Megatron
        (``p2p_communication.py``, ``--scatter-gather-tensors-in-pipeline``, SC'21 Sec. 4.1) and by DeepSpeed's
        pipeline engine alike (``deepspeed/runtime/pipe/engine.py``: ``is_pipe_partitioned`` /
        ``is_grad_partitioned`` with model parallelism, a ``PartitionedTensor`` over the slice-parallel group sent
        in ``_exec_forward_pass`` and gathered with ``.full()`` on the receiving stage)."""
        return self.tokens * hidden_size * self.act_bytes / self.tp

    @property
    def act_dtype(self) -> str:
        """Data type of activations (FP8 jobs keep 16-bit activations)."""
        return {"fp32": "fp32", "fp16": "fp16"}.get(self.precision, "bf16")

    @property
    def attention_dtype(self) -> str:
        """Data type of the attention kernels (TF32 tensor cores for fp32 jobs, 16-bit otherwise)."""
        return {"fp32": "tf32", "fp16": "fp16"}.get(self.precision, "bf16")


@lru_cache(maxsize=4096)
def _with_recompute(shard: Shard, recompute: str) -> Shard:
    return dataclasses.replace(shard, recompute=recompute)


@dataclass(frozen=True, slots=True)
class Work:
    """Compute and communication of one block for one micro-batch (forward, backward and recompute)."""

    fwd: tuple[ComputeOp, ...] = ()
    bwd: tuple[ComputeOp, ...] = ()
    recompute: tuple[ComputeOp, ...] = ()
    comm_fwd: tuple[CommOp, ...] = ()
    comm_bwd: tuple[CommOp, ...] = ()
    comm_recompute: tuple[CommOp, ...] = ()
    tags: tuple[str, ...] = field(default=())


@per_job

def _fp8_tp_gather(job: Job) -> Fp8TpGather:
    """The stack's FP8 sequence-parallel all-gathers (:attr:`Framework.fp8_tp_gather`) where they apply: FP8 training
    under a per-tensor recipe; else none."""
    tr = job.training
    if tr.precision != "fp8" or tr.fp8_recipe not in PER_TENSOR_FP8_RECIPES:
        return "none"
    return job.framework.fp8_tp_gather or "none"


def shard_of(job: Job) -> Shard:
    """The :class:`Shard` of a job."""
    par, tr = job.parallelism, job.training
    return Shard(
        micro_batch=tr.micro_batch_size,
        seq=job.seq_length,
        tp=par.tp,
        cp=par.cp,
        ep=par.ep,
        sequence_parallel=job.sequence_parallel,
        precision=tr.precision,
        attention=job.attention_path,
        recompute=tr.recompute_granularity,
        fusion=fusion_of(job),
        etp=par.expert_tp,
        fp8_recipe=tr.fp8_recipe if tr.precision == "fp8" else None,
        recompute_modules=tuple(tr.recompute_modules),
        moe_shared_expert_overlap=tr.moe_shared_expert_overlap,
        moe_a2a_overlap=tr.moe_a2a_overlap,
        summa=par.summa,
        tp_rows=par.grid[0],
        summa_blocks=par.summa_blocks if par.summa else 1,
        cp_comm=job.framework.cp_comm_type or "p2p",
        cp_a2a=job.cp_levels[0],
        async_tp=job.framework.async_tp_grad_reduce,
        selective=job.framework.selective_recompute,
        moe_expert_launch=job.framework.moe_expert_launch,
        flash_kernel=job.framework.flash_kernel,
        moe_dispatcher=tr.moe_token_dispatcher,
        ep_nodes=placements_of(job)[Group.EP].nodes if par.ep > 1 else 1,
        fp8_tp_gather=_fp8_tp_gather(job),
    )


def _ew(shard: Shard, name: str, phase: Phase, nbytes: float, flops: float = 0.0, grad_of: str = "") -> ComputeOp:
    """A memory-bound op on this shard's activations."""
    return elementwise(name, phase, nbytes, flops, shard.act_dtype, grad_of)


def _casts(shard: Shard, elements: float) -> list[ComputeOp]:
    """FP8 quantization of a GEMM input with the job's recipe (:mod:`trainsim.workload.fp8`)."""
    if shard.precision != "fp8":
        return []
    return [_ew(shard, "fp8_cast", "fwd", elements * recipe_cost(shard.fp8_recipe).cast_bytes)]


def _grad_casts(shard: Shard, elements: float) -> list[ComputeOp]:
    """FP8 quantization of a linear layer's output gradient before its data- and weight-gradient GEMMs (Transformer
    Engine casts ``grad_output`` to FP8 with its transpose, E5M2 in the hybrid format), with the job's recipe."""
    if shard.precision != "fp8":
        return []
    return [_ew(shard, "fp8_grad_cast", "bwd", elements * recipe_cost(shard.fp8_recipe).cast_bytes)]


def _bias_grad(shard: Shard, name: str, elements: float) -> list[ComputeOp]:
    """The reduction of a linear layer's bias gradient over its ``elements`` output-gradient elements, where the
    stack does not produce it in the GEMM (:func:`trainsim.workload.fusion.bias_grad_bytes`)."""
    nbytes = fz.bias_grad_bytes(shard.fusion, shard.act_bytes) * elements
    # runs in the linear layer's backward (its grad_of orders it there, trainsim.graph.blocks.backward_order)
    return [_ew(shard, f"{name}_bias_grad", "bwd", nbytes, elements, grad_of=name)] if nbytes else []


def _norm(name: str, shard: Shard, h: int, rms: bool = False) -> tuple[ComputeOp, ComputeOp]:
    """LayerNorm/RMSNorm over ``h`` (fused, or the stack's eager RMSNorm chain when ``rms``)."""
    n = shard.elementwise_tokens * h
    f, b = fz.norm_bytes(shard.fusion, shard.act_bytes, rms)
    return _ew(shard, name, "fwd", f * n, 5.0 * n), _ew(shard, f"{name}_grad", "bwd", b * n, 8.0 * n)


def _dropout_add(name: str, shard: Shard, model: Model) -> tuple[ComputeOp, ComputeOp]:
    """Bias + dropout + residual add (fused: read two tensors, write one, a 1-byte mask when dropout runs)."""
    n = shard.elementwise_tokens * model.hidden_size
    f, b = fz.dropout_add_bytes(shard.fusion, shard.act_bytes, model.add_bias_linear, model.hidden_dropout > 0)
    return _ew(shard, name, "fwd", f * n), _ew(shard, f"{name}_grad", "bwd", b * n)


def _tp_comm(shard: Shard, h: int, name: str, entering: bool, linear: Linear,
             anchor: ComputeOp | None = None) -> tuple[CommOp, ...]:
    """Forward TP collective around a column-parallel (``entering``) or row-parallel ``linear``.

    With ``--tp-comm-overlap`` (TE userbuffers) the all-gather/reduce-scatter hides behind that GEMM; the
    all-reduce of a row-parallel linear without sequence parallelism blocks right before ``anchor`` (the residual
    add), or at the end of the block.
    """
    if shard.tp == 1:
        return ()
    if shard.sequence_parallel:
        kind: Collective = "all_gather" if entering else "reduce_scatter"
        e = shard.tp_gather_bytes() if entering else shard.act_bytes
        return (CommOp(name, kind, Group.TP, "fwd", shard.tokens * h * e, Overlap.TP_COMM_OVERLAP, linear[0]),)
    if entering:
        return ()  # identity in forward, all-reduce in backward
    size = shard.tokens * h * shard.act_bytes
    return (CommOp(name, "all_reduce", Group.TP, "fwd", size, anchor=anchor, before=True),)


def _tp_comm_bwd(shard: Shard, h: int, name: str, entering: bool, linear: Linear) -> tuple[CommOp, ...]:
    """Backward mirror of :func:`_tp_comm`.

    Megatron (2022 on) and Megatron-Core overlap the input-gradient reduction of a column-parallel linear with its
    weight-gradient GEMM, and (with sequence parallelism) the re-gather of its input with the data-gradient GEMM
    (``shard.async_tp``); without that (Megatron-LM 2021's ``copy_to_tensor_model_parallel_region``, DTensor
    without async TP) the collectives block the backward there.
    """
    if shard.tp == 1:
        return ()
    size = shard.tokens * h * shard.act_bytes
    _f, dgrad, wgrad = linear
    if entering:
        kind: Collective = "reduce_scatter" if shard.sequence_parallel else "all_reduce"
        mode = Overlap.COMPUTE if shard.async_tp else Overlap.NONE
        ops = [CommOp(f"{name}_grad", kind, Group.TP, "bwd", size, mode, wgrad)]
        if shard.sequence_parallel:
            gathered = shard.tokens * h * shard.tp_gather_bytes()
            ops.append(CommOp(f"{name}_regather", "all_gather", Group.TP, "bwd", gathered, mode, dgrad))
        return tuple(ops)
    if shard.sequence_parallel:
        gathered = shard.tokens * h * shard.tp_gather_bytes(backward_grad=True)
        return (CommOp(f"{name}_grad", "all_gather", Group.TP, "bwd", gathered, Overlap.TP_COMM_OVERLAP, dgrad),)
    return ()


def _mla_projections(model: Model, shard: Shard) -> tuple[list[ComputeOp], list[ComputeOp], list[ComputeOp], Linear]:
    """Multi-head latent attention projections (Megatron-Core ``MLASelfAttention``): the down-projections to the
    query and key/value latents (replicated over TP), their RMSNorms, and the column-parallel up-projections to
    ``heads/tp`` query heads of ``qk_head_dim + qk_pos_emb_head_dim`` and key/value heads of ``qk_head_dim`` +
    ``v_head_dim`` (the decoupled RoPE key is shared by all heads). Returns (forward, backward, up-projection forward
    ops recomputed with ``--recompute-modules mla_up_proj``, the first projection's forward and gradient GEMMs)."""
    t, h, tp = shard.tokens, model.hidden_size, shard.tp
    heads = model.num_attention_heads // tp
    qk, rope, v = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
    dt, e = shard.gemm_dtype, shard.act_bytes
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    up: list[ComputeOp] = []

    def linear(name: str, n: int, k: int, is_up: bool = False) -> Linear:
        f, d, w = gemm_with_grads(name, t, n, k, dt)
        fwd.extend(_casts(shard, t * k))
        fwd.append(f)
        bwd.extend((*_grad_casts(shard, t * n), d, w))
        if is_up:
            up.append(f)
        return f, d, w

    def norm(name: str, width: int) -> None:
        n = t * width
        fwd.append(_ew(shard, name, "fwd", 2 * e * n, 5.0 * n))
        bwd.append(_ew(shard, f"{name}_grad", "bwd", 3 * e * n, 8.0 * n))

    if model.q_lora_rank:
        first = linear("q_down", model.q_lora_rank, h)
        norm("q_norm", model.q_lora_rank)
        linear("q_up", heads * (qk + rope), model.q_lora_rank, is_up=True)
    else:
        first = linear("q_proj", heads * (qk + rope), h)
    linear("kv_down", model.kv_lora_rank + rope, h)
    norm("kv_norm", model.kv_lora_rank)
    linear("kv_up", heads * (qk + v), model.kv_lora_rank, is_up=True)
    n = t * (heads + 1) * rope
    fwd.append(_ew(shard, "rope", "fwd", 2 * e * n, 3.0 * n))
    bwd.append(_ew(shard, "rope_grad", "bwd", 2 * e * n, 3.0 * n))
    return fwd, bwd, up, first


class _AttentionOps(NamedTuple):
    """The attention ops another block's collectives may hide behind (MoE all-to-all overlap)."""

    core_fwd: ComputeOp | None  # the fused attention kernel (None on the unfused path)
    core_bwd: ComputeOp | None
    proj: Linear  # the output projection's forward, data- and weight-gradient GEMMs



def core_attention(shard: Shard, model: Model, b: int, heads: int, d: int, dt: str, seq_q: int,
                   seq_kv: int) -> tuple[list[ComputeOp], list[ComputeOp]]:
    """The core attention of one micro-batch on one GPU (forward ops, backward ops) for ``heads`` local heads of
    dimension ``d``, ``seq_q`` queries against ``seq_kv`` keys: the fused flash kernel, or Megatron's core attention
    on the scores — QKᵀ and AV as batched GEMMs, the softmax (fused kernel, or the eager fp32 chain:
    :mod:`trainsim.workload.fusion`) and attention dropout (when the model and the stack run it) as memory-bound
    kernels. The one owner of these ops for the 1D layer and the 2D (SUMMA) grid."""
    if shard.attention == "flash":
        adt = shard.attention_dtype
        masked = shard.fusion.masked_attention  # an explicit causal mask tensor: every block, masked kernels
        name, causal = ("flash_attn_masked", False) if masked else ("flash_attn", model.causal)
        eff = fz.masked_attention_efficiency() if masked else 1.0
        lib = shard.flash_kernel
        return ([attention(name, "fwd", b, heads, seq_q, seq_kv, d, causal, adt, eff, lib)],
                [attention(f"{name}_grad", "bwd", b, heads, seq_q, seq_kv, d, causal, adt, eff, lib)])
    e = shard.act_bytes
    scores = b * heads * seq_q * seq_kv
    sf, sb = fz.softmax_bytes(shard.attention, e)
    drop = model.attention_dropout > 0 and shard.fusion.dropout
    gdt = "bf16" if dt in LOW_PRECISION else dt
    fwd = [gemm("attn_qk", "fwd", seq_q, seq_kv, d, gdt, batch=b * heads),
           _ew(shard, "softmax", "fwd", sf * scores, 5.0 * scores)]
    if drop:
        fwd.append(_ew(shard, "attn_dropout", "fwd", (2 * e + 1) * scores))
    fwd.append(gemm("attn_av", "fwd", seq_q, d, seq_kv, gdt, batch=b * heads))
    bwd = [gemm("attn_av_dgrad", "bwd", seq_q, seq_kv, d, gdt, batch=b * heads, grad_of="attn_av"),
           gemm("attn_av_wgrad", "bwd", seq_kv, d, seq_q, gdt, batch=b * heads, grad_of="attn_av",
                layout=GemmLayout.WGRAD)]  # of V
    if drop:
        bwd.append(_ew(shard, "attn_dropout_grad", "bwd", (2 * e + 1) * scores))
    bwd += [_ew(shard, "softmax_grad", "bwd", sb * scores, 4.0 * scores),
            gemm("attn_qk_dgrad", "bwd", seq_q, d, seq_kv, gdt, batch=b * heads, grad_of="attn_qk"),
            gemm("attn_qk_wgrad", "bwd", seq_kv, d, seq_q, gdt, batch=b * heads, grad_of="attn_qk",
                 layout=GemmLayout.WGRAD)]  # of K
    return fwd, bwd


def _attention_block(model: Model, shard: Shard) -> tuple[Work, _AttentionOps]:
    b, s, tp, cp = shard.micro_batch, shard.seq, shard.tp, shard.cp
    h, d = model.hidden_size, model.head_dim
    heads = model.num_attention_heads // tp
    groups = model.query_groups // tp
    t = shard.tokens
    e = shard.act_bytes
    dt = shard.gemm_dtype
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []

    ln_f, ln_b = _norm("input_norm", shard, h, model.normalization == "RMSNorm")
    fwd.append(ln_f)
    bwd.append(ln_b)
    up_recompute: list[ComputeOp] = []
    if model.multi_latent_attention:
        m_f, m_b, up, first = _mla_projections(model, shard)
        fwd += m_f
        bwd += m_b
        if "mla_up_proj" in shard.recompute_modules:
            up_recompute = list(up)
        if "layernorm" in shard.recompute_modules:  # MLA's input norm is its own module: output recomputed
            up_recompute.insert(0, ln_f)
        d = (model.head_dim + model.v_dim) // 2  # attention FLOPs: QKᵀ over qk dims, PV over v dims
    else:
        fwd += _casts(shard, t * h)
        first = q_f, q_d, q_w = gemm_with_grads("qkv", t, (heads + 2 * groups) * d, h, dt)
        fwd.append(q_f)
        n_qkv = t * (heads + 2 * groups) * d
        # Megatron's fused QKV: split into views, gradients concatenated in backward (trainsim.workload.fusion)
        split = fz.qkv_split_grad_bytes(shard.fusion, e) * n_qkv
        concat = [_ew(shard, "qkv_split_grad", "bwd", split, grad_of="qkv")] if split else []
        bwd += [*concat, *_grad_casts(shard, n_qkv), q_d, q_w]
        if model.add_bias_linear or model.add_qkv_bias:
            if add := fz.qkv_bias_add_bytes(shard.fusion, e) * n_qkv:
                fwd.append(_ew(shard, "qkv_bias", "fwd", add, n_qkv))
            bwd += _bias_grad(shard, "qkv", n_qkv)
        if model.qk_layernorm:
            n = t * (heads + groups) * d
            fwd.append(_ew(shard, "qk_norm", "fwd", 2 * e * n, 5.0 * n))
            bwd.append(_ew(shard, "qk_norm_grad", "bwd", 3 * e * n, 8.0 * n))
        if model.position_embedding_type == "rope":
            n = t * (heads + groups) * d
            rf, rb = fz.rope_bytes(shard.fusion, e)
            fwd.append(_ew(shard, "rope", "fwd", rf * n, 3.0 * n))
            bwd.append(_ew(shard, "rope_grad", "bwd", rb * n, 3.0 * n))
    # all-to-all CP (Ulysses; the inner level of hierarchical a2a+p2p): the attention runs on a·s/cp tokens for heads/a
    # of the local heads, a = the all-to-all level's size; the ring passes K/V between the cp/a levels
    a2a = 1 if cp == 1 else {"a2a": cp, "a2a+p2p": shard.cp_a2a}.get(shard.cp_comm, 1)
    ring = cp // a2a
    if shard.attention == "flash":
        # sliding-window / chunked layers: the keys actually attended, averaged over the layers
        seq_q, seq_kv = s * a2a // cp, (max(1, round(s * model.attention_span(s))) if model.causal else s)
    else:
        seq_q = seq_kv = s  # the unfused path computes all s² scores (the causal mask does not save work)
    core_fwd, core_bwd = core_attention(shard, model, b, heads // a2a, d, dt, seq_q, seq_kv)
    fwd += core_fwd
    bwd += core_bwd
    vd = model.v_dim
    fwd += _casts(shard, t * heads * vd)
    proj = p_f, p_d, p_w = gemm_with_grads("attn_proj", t, h, heads * vd, dt)
    fwd.append(p_f)
    bwd += [*_grad_casts(shard, t * h), p_d, p_w]
    if model.add_bias_linear:  # added after the TP reduction, on this GPU's sequence shard
        bwd += _bias_grad(shard, "attn_proj", shard.elementwise_tokens * h)
    da_f, da_b = _dropout_add("attn_bias_dropout_add", shard, model)
    fwd.append(da_f)
    bwd.append(da_b)

    comm_fwd = (_tp_comm(shard, h, "attn_in", True, first)
                + _tp_comm(shard, h, "attn_out", False, proj, anchor=da_f))
    comm_bwd = (_tp_comm_bwd(shard, h, "attn_out", False, proj)
                + _tp_comm_bwd(shard, h, "attn_in", True, first))
    flash_f, flash_b = (core_fwd[0], core_bwd[0]) if shard.attention == "flash" else (None, None)
    if cp > 1 and shard.cp_comm == "allgather":
        # All-gather CP (Llama 3 §3.3.2; Megatron --cp-comm-type allgather): the K/V blocks of all cp ranks are
        # gathered before the attention of the local queries, "exposed in the critical path"; backward gathers them
        # again (only the local block is saved) and reduce-scatters dK/dV after the attention's backward
        kv_all = 2 * b * (s // cp) * groups * d * e * cp
        comm_fwd += (CommOp("cp_kv_allgather", "all_gather", Group.CP, "fwd", kv_all, behind=core_fwd[0]),)
        comm_bwd += (CommOp("cp_kv_regather", "all_gather", Group.CP, "bwd", kv_all, behind=core_bwd[0]),
                     CommOp("cp_dkv_reduce_scatter", "reduce_scatter", Group.CP, "bwd", kv_all, behind=core_bwd[-1]))
    elif cp > 1:
        if a2a > 1:
            # All-to-all CP (Megatron --cp-comm-type a2a, DeepSpeed-Ulysses; the inner level of a2a+p2p): Q, K and V
            # go from sequence shards to head shards before the attention and its output back after it; backward
            # mirrors (dO in, dQ/dK/dV out). Each blocks the attention it feeds or follows (TE runs them on the
            # compute stream's critical path).
            group = Group.CP if ring == 1 else Group.CP_A2A
            qkv = b * (s // cp) * (heads + 2 * groups) * d * e
            out = b * (s // cp) * heads * vd * e
            comm_fwd += (CommOp("cp_qkv_all_to_all", "all_to_all", group, "fwd", qkv, behind=core_fwd[0]),
                         CommOp("cp_out_all_to_all", "all_to_all", group, "fwd", out, behind=core_fwd[-1]))
            comm_bwd += (CommOp("cp_dout_all_to_all", "all_to_all", group, "bwd", out, behind=core_bwd[0]),
                         CommOp("cp_dqkv_all_to_all", "all_to_all", group, "bwd", qkv, behind=core_bwd[-1]))
        if ring > 1:
            # Ring attention (p2p; the outer level of a2a+p2p): ring-1 steps, each passing a K/V block (forward) or
            # K/V plus dK/dV (backward), under the fused attention kernel (at the end of the block on the unfused
            # path); a block is the same size either way (a·s/cp tokens of groups/a K/V heads)
            group = Group.CP if a2a == 1 else Group.CP_P2P
            kv_block = 2 * b * (s // cp) * groups * d * e
            comm_fwd += (_behind(CommOp("cp_kv_ring", "send_recv", group, "fwd", (ring - 1) * kv_block), flash_f),)
            comm_bwd += (_behind(CommOp("cp_kv_ring_grad", "send_recv", group, "bwd", 2 * (ring - 1) * kv_block),
                                 flash_b),)
    recompute = tuple(core_fwd) if shard.recompute == "selective" and shard.attention != "flash" else ()
    work = Work(tuple(fwd), tuple(bwd), recompute + tuple(up_recompute), comm_fwd, comm_bwd)
    return work, _AttentionOps(flash_f, flash_b, proj)


def _behind(op: CommOp, target: ComputeOp | None, anchor: ComputeOp | None = None, before: bool = False) -> CommOp:
    """``op`` always hidden behind ``target`` (the framework overlaps it); without a target it blocks at ``anchor``
    (``before`` it or after), or at the end of the block."""
    if target is None:
        return dataclasses.replace(op, anchor=anchor, before=before)
    return dataclasses.replace(op, overlap=Overlap.COMPUTE, behind=target, anchor=anchor, before=before)


#: The activation op of an MLP per activation: (name suffix, forward FLOPs, backward FLOPs per element).
ACTIVATION_OPS = {"swiglu": ("swiglu", 6.0, 10.0), "gelu": ("bias_gelu", 10.0, 16.0),
                  "squared_relu": ("squared_relu", 2.0, 3.0)}


def activation_ops(shard: Shard, name: str, n: float, activation: str, bias: bool) -> tuple[ComputeOp, ComputeOp]:
    """The forward and backward op of an MLP activation over ``n`` elements (:data:`ACTIVATION_OPS`, bytes from
    :func:`trainsim.workload.fusion.activation_bytes`); the one owner for the 1D layer and the SUMMA grid."""
    suffix, ff, fb = ACTIVATION_OPS[activation]
    af, ab = fz.activation_bytes(shard.fusion, shard.act_bytes, activation, bias)
    return (_ew(shard, f"{name}_{suffix}", "fwd", af * n, ff * n),
            _ew(shard, f"{name}_{suffix}_grad", "bwd", ab * n, fb * n))


def _mlp_gemms(name: str, t: int, h: int, ffn: int, activation: str, dt: str, shard: Shard,
               batch: int = 1, bias: bool = True) -> tuple[list[ComputeOp], list[ComputeOp], Linear, Linear]:
    """Forward and backward ops of an MLP (fc1, activation, fc2), and the two linear layers' GEMMs."""
    up = 2 * ffn if activation == "swiglu" else ffn
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    fwd += _casts(shard, batch * t * h)
    fc1 = f1, d1, w1 = gemm_with_grads(f"{name}_fc1", t, up, h, dt, batch)
    fwd.append(f1)
    bwd += [*_grad_casts(shard, batch * t * up), d1, w1]
    if bias:
        bwd += _bias_grad(shard, f"{name}_fc1", batch * t * up)
    n = batch * t * ffn
    act_f, act_b = activation_ops(shard, name, n, activation, bias)
    fwd.append(act_f)
    bwd.append(act_b)
    fwd += _casts(shard, n)
    fc2 = f2, d2, w2 = gemm_with_grads(f"{name}_fc2", t, h, ffn, dt, batch)
    fwd.append(f2)
    bwd += [*_grad_casts(shard, batch * t * h), d2, w2]
    if bias:  # a dense layer's fc2 bias is added after the TP reduction, on this GPU's sequence shard
        bwd += _bias_grad(shard, f"{name}_fc2", batch * t * h if batch > 1 else shard.elementwise_tokens * h)
    return fwd, bwd, fc1, fc2


def moe_expert_tokens(model: Model, shard: Shard) -> tuple[float, float]:
    """(token copies this GPU dispatches, token rows its experts compute) for one micro-batch of one MoE layer.

    Megatron's MoE layer takes the sequence-parallel input (``tokens/tp`` per GPU); each token goes to ``topk``
    experts, so a GPU dispatches ``tokens·topk/tp`` copies over the expert-parallel group and, after the all-gather
    over the expert tensor-parallel group, its ``experts/ep`` local experts compute ``tokens·topk·etp/tp`` rows of
    ``ffn/etp`` columns. The busiest rank receives ``moe_load_imbalance`` times the mean (capped by the capacity
    factor when tokens are dropped).
    """
    return expert_rows(model, shard.tokens, shard.tp, shard.expert_tp)


def expert_rows(model: Model, tokens: float, tp: int, etp: int) -> tuple[float, float]:
    """:func:`moe_expert_tokens` for ``tokens`` tokens per context-parallel rank (shared with the memory model)."""
    copies = tokens * model.moe_router_topk / tp
    load = model.moe_load_imbalance
    if model.moe_expert_capacity_factor is not None:
        load = min(load, model.moe_expert_capacity_factor)
    return copies, copies * etp * load


def _expert_launches(ops: list[ComputeOp], shard: Shard, local_experts: int) -> list[ComputeOp]:
    """The expert ops as the stack issues them (``Framework.moe_expert_launch``): a Python loop over the local
    experts (Megatron-Core's SequentialMLP, DeepSpeed-MoE, transformers) issues every op once per expert; a C++ loop
    (Transformer Engine's GroupedLinear on Hopper: one cuBLAS GEMM per expert) launches one GEMM kernel per expert
    from one Python call; a grouped kernel (``torch._grouped_mm``) is one launch."""
    if shard.moe_expert_launch == "python_loop":
        return [replace(op, host_calls=local_experts, kernels=local_experts) for op in ops]
    if shard.moe_expert_launch == "cpp_loop":
        return [replace(op, kernels=local_experts) if op.kind == "gemm" else op for op in ops]
    return ops


def _moe_block(model: Model, shard: Shard, attn: _AttentionOps) -> tuple[
        list[ComputeOp], list[ComputeOp], list[ComputeOp], tuple[CommOp, ...], tuple[CommOp, ...],
        tuple[CommOp, ...]]:
    """Router, permutation, token dispatch, grouped expert GEMMs, combine and shared expert of one MoE layer.

    Mirrors Megatron-Core's ``MoELayer`` with the all-to-all token dispatcher: router (a GEMM to ``num_experts``
    logits on the local ``tokens/tp`` tokens, top-k and the load-balancing loss or the expert-bias update of
    auxiliary-loss-free balancing), permutation (gather of the token copies by expert), all-to-all dispatch over the
    EP group, all-gather over the expert-TP group, grouped GEMMs (``experts/ep`` experts at once), then the mirror
    path (reduce-scatter, all-to-all combine, unpermute with the routing weights). The shared expert is an ordinary
    TP MLP on all tokens; with ``--moe-shared-expert-overlap`` it runs while the tokens are dispatched; with the
    all-to-all overlap of merged 1F1B / DualPipe the attention of another micro-batch (``attn``) runs meanwhile.
    ``--recompute-modules`` (Megatron-Core, selective granularity): ``moe_act`` reruns the expert activation,
    ``shared_experts`` the shared expert (with its TP collectives), ``moe`` the whole layer (its all-to-alls too).
    Returns (forward, backward, recompute, forward comm, backward comm, recompute comm).
    """
    h, tp, etp = model.hidden_size, shard.tp, shard.expert_tp
    dt, e = shard.gemm_dtype, shard.act_bytes
    experts = model.num_experts or 1
    local_experts = max(1, experts // shard.ep)
    t_local = shard.tokens // tp
    copies, rows = moe_expert_tokens(model, shard)
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    r_f, r_d, r_w = gemm_with_grads("router", t_local, experts, h, "fp32" if dt == "tf32" else "bf16")
    fwd.append(r_f)
    bwd += [r_d, r_w]
    scores = t_local * experts
    # softmax/sigmoid, top-k, normalisation (+ the aux-loss statistics or the expert-bias correction): ~6 fp32 passes
    fwd.append(_ew(shard, "router_topk", "fwd", 6 * 4.0 * scores, 10.0 * scores))
    bwd.append(_ew(shard, "router_topk_grad", "bwd", 4 * 4.0 * scores, 6.0 * scores))
    perm = copies * h * e
    # gather copies: read rows, write permuted rows. The dropless dispatcher first copies the per-expert token counts
    # to the host (Megatron-Core's ``cuda_sync_point``; transformers' expert loop reads them too): a host sync
    permute = replace(_ew(shard, "moe_permute", "fwd", 2 * perm), host_sync=True)
    permute_grad = _ew(shard, "moe_permute_grad", "bwd", 2 * perm)
    fwd.append(permute)
    bwd.append(permute_grad)
    # the all-to-all dispatcher receives the tokens grouped by source rank: it sorts them by local expert after the
    # dispatch and back before the combine (Megatron-Core's "Permutation 2" / "Unpermutation 2", sort_chunks_by_idxs;
    # torchtitan's _permute / _unpermute): a read and a write of every received row each way
    regroup = shard.moe_dispatcher == "alltoall" and shard.ep > 1 and local_experts > 1
    sort_bytes = 2 * rows * h * e
    if regroup:
        fwd.append(_ew(shard, "moe_sort", "fwd", sort_bytes))
        bwd.append(_ew(shard, "moe_sort_grad", "bwd", sort_bytes))
    per_expert = max(1, round(rows / local_experts))
    f, b_, _, _ = _mlp_gemms("expert", per_expert, h, model.expert_ffn_size // etp, model.mlp_activation, dt, shard,
                             batch=local_experts, bias=model.add_bias_linear)
    f, b_ = _expert_launches(f, shard, local_experts), _expert_launches(b_, shard, local_experts)
    fwd += f
    bwd += b_
    act_recompute = [op for op in f if op.name.startswith("expert_") and op.kind == "elementwise"
                     and "moe_act" in shard.recompute_modules]
    if regroup:
        fwd.append(_ew(shard, "moe_unsort", "fwd", sort_bytes))
        bwd.append(_ew(shard, "moe_unsort_grad", "bwd", sort_bytes))
    unpermute = _ew(shard, "moe_unpermute", "fwd", 3 * perm)  # scatter-add weighted copies back to tokens
    unpermute_grad = _ew(shard, "moe_unpermute_grad", "bwd", 3 * perm)
    fwd.append(unpermute)
    bwd.append(unpermute_grad)
    shared = model.moe_shared_expert_intermediate_size or 0
    comm_fwd: list[CommOp] = []
    comm_bwd: list[CommOp] = []
    shared_recompute_comm: tuple[CommOp, ...] = ()
    shared_fc: tuple[Linear, Linear] | None = None
    if shared:
        f, b_, fc1, fc2 = _mlp_gemms("shared_expert", shard.tokens, h, shared // tp, model.mlp_activation, dt, shard,
                                     bias=model.add_bias_linear)
        shared_fc = fc1, fc2
        fwd += f
        bwd += b_
        shared_comm = _tp_comm(shard, h, "shared_in", True, fc1) + _tp_comm(shard, h, "shared_out", False, fc2)
        comm_fwd += shared_comm
        if "shared_experts" in shard.recompute_modules and "moe" not in shard.recompute_modules:
            act_recompute = [*act_recompute, *f]  # checkpointed: its forward (and TP collectives) run again
            shared_recompute_comm = shared_comm
        comm_bwd += _tp_comm_bwd(shard, h, "shared_out", False, fc2)
        comm_bwd += _tp_comm_bwd(shard, h, "shared_in", True, fc1)
    if shard.ep > 1:
        a2a = copies * model.moe_load_imbalance * h * e  # the busiest receiver sets the pace
        # flex (DeepEP / HybridEP): a token crosses the network once per node it reaches, then NVLink
        share = network_copy_ratio(model, shard.ep_nodes) if shard.moe_dispatcher == "flex" else 1.0
        hide: ComputeOp | None = None
        hide_c: ComputeOp | None = None
        if shared_fc is not None and shard.moe_shared_expert_overlap:
            hide, hide_c = shared_fc[0][0], shared_fc[1][0]
        hide_b = hide_bc = None
        if shard.moe_a2a_overlap:  # another micro-batch's attention runs meanwhile (merged 1F1B / DualPipe)
            hide, hide_c = attn.core_fwd, attn.proj[0]
            hide_b, hide_bc = attn.core_bwd, attn.proj[1]
        # without a compute op to hide behind: dispatch right after the permutation, combine right before the
        # unpermutation (and the mirror in backward)
        def a2a_op(name: str, phase: Phase) -> CommOp:
            return CommOp(name, "all_to_all", Group.EP, phase, a2a, network_share=share)

        comm_fwd += [_behind(a2a_op("moe_dispatch", "fwd"), hide, permute),
                     _behind(a2a_op("moe_combine", "fwd"), hide_c, unpermute, True)]
        comm_bwd += [_behind(a2a_op("moe_combine_grad", "bwd"), hide_b, unpermute_grad),
                     _behind(a2a_op("moe_dispatch_grad", "bwd"), hide_bc, permute_grad, True)]
    if etp > 1:
        ag = rows * h * e
        comm_fwd += [CommOp("moe_etp_gather", "all_gather", Group.ETP, "fwd", ag),
                     CommOp("moe_etp_scatter", "reduce_scatter", Group.ETP, "fwd", ag)]
        comm_bwd += [CommOp("moe_etp_gather_grad", "all_gather", Group.ETP, "bwd", ag),
                     CommOp("moe_etp_scatter_grad", "reduce_scatter", Group.ETP, "bwd", ag)]
    if "moe" in shard.recompute_modules:  # the whole MoE layer checkpointed: router, dispatch, experts, combine again
        return fwd, bwd, list(fwd), tuple(comm_fwd), tuple(comm_bwd), tuple(comm_fwd)
    return fwd, bwd, act_recompute, tuple(comm_fwd), tuple(comm_bwd), shared_recompute_comm


def _mlp_block(model: Model, shard: Shard, moe: bool, attn: _AttentionOps) -> Work:
    h, tp = model.hidden_size, shard.tp
    t = shard.tokens
    dt = shard.gemm_dtype
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    recompute: list[ComputeOp] = []
    ln_f, ln_b = _norm("mlp_norm", shard, h, model.normalization == "RMSNorm")
    fwd.append(ln_f)
    bwd.append(ln_b)
    if moe and "layernorm" in shard.recompute_modules:
        recompute.append(ln_f)  # the MoE layer's own pre-MLP norm, output discarded and recomputed
    fc2: Linear | None = None
    comm_re: tuple[CommOp, ...] = ()
    if not moe:
        f, b_, fc1, fc2 = _mlp_gemms("mlp", t, h, model.ffn_size // tp, model.mlp_activation, dt, shard,
                                     bias=model.add_bias_linear)
        comm_fwd: tuple[CommOp, ...] = _tp_comm(shard, h, "mlp_in", True, fc1)
        fwd += f
        bwd += b_
        comm_bwd: tuple[CommOp, ...] = (_tp_comm_bwd(shard, h, "mlp_out", False, fc2)
                                         + _tp_comm_bwd(shard, h, "mlp_in", True, fc1))
        if "mlp" in shard.recompute_modules:  # the dense MLP checkpointed: its GEMMs and TP collectives again
            recompute += f
    else:
        f, b_, moe_recompute, comm_fwd, comm_bwd, comm_re = _moe_block(model, shard, attn)
        recompute += moe_recompute
        fwd += f
        bwd += b_
    da_f, da_b = _dropout_add("mlp_bias_dropout_add", shard, model)
    fwd.append(da_f)
    bwd.append(da_b)
    if fc2 is not None:
        comm_fwd += _tp_comm(shard, h, "mlp_out", False, fc2, anchor=da_f)
        if "mlp" in shard.recompute_modules:  # both of the dense MLP's TP collectives run again
            comm_re = comm_fwd
    return Work(tuple(fwd), tuple(bwd), tuple(recompute), comm_fwd, comm_bwd, comm_re)


@lru_cache(maxsize=4096)
def layer_work(model: Model, shard: Shard, moe: bool = False) -> Work:
    """One transformer layer (attention + MLP or MoE) for one micro-batch on one GPU."""
    if shard.summa:
        from trainsim.workload.summa import summa_layer_work

        return summa_layer_work(model, shard)
    a, attn = _attention_block(model, shard)
    m = _mlp_block(model, shard, moe, attn)
    fwd = a.fwd + m.fwd
    comm_fwd = a.comm_fwd + m.comm_fwd
    if shard.recompute == "full":
        recompute, comm_re = fwd, comm_fwd
    elif shard.op_sac(model, moe):
        recompute, comm_re = op_sac_recompute(model, shard, fwd), tuple(c for c in comm_fwd
                                                                        if c.collective == "all_gather")
    else:
        recompute, comm_re = a.recompute + m.recompute, a.comm_recompute + m.comm_recompute
    mlp = model.moe_mlp_params / shard.ep if moe else model.dense_mlp_params
    acc = _grad_accumulation(shard, "layer_grad_accumulation", (model.attention_params + mlp) / shard.tp)
    return Work(fwd, m.bwd + a.bwd + acc, recompute, comm_fwd, m.comm_bwd + a.comm_bwd, comm_re,
                tags=("moe",) if moe else ())


def sac_matmuls(model: Model, shard: Shard) -> list[tuple[str, int, int, bool]]:
    """The forward matmuls of a dense layer in execution order as torchtitan runs them (separate q, k, v; w1, w3,
    w2 for SwiGLU), each as (name, output columns on this GPU, input columns, saved): torchtitan's op-level selective
    activation checkpointing saves the output of every other matmul (the 1st, 3rd, ...; ``_custom_policy`` counts
    ``aten.mm`` per layer) and recomputes the others (torchtitan ``activation_checkpoint.py``,
    ``selective_ac_option='op'``)."""
    tp, d, h = shard.tp, model.head_dim, model.hidden_size
    heads, groups = model.num_attention_heads // tp, model.query_groups // tp
    ffn = model.ffn_size // tp
    mms = [("q", heads * d, h), ("k", groups * d, h), ("v", groups * model.v_dim, h),
           ("o", h, heads * model.v_dim)]
    mms += [("w1", ffn, h), ("w3", ffn, h), ("w2", h, ffn)] if model.swiglu else [("fc1", ffn, h), ("fc2", h, ffn)]
    return [(name, n, k, i % 2 == 0) for i, (name, n, k) in enumerate(mms)]


def op_sac_recompute(model: Model, shard: Shard, fwd: tuple[ComputeOp, ...]) -> tuple[ComputeOp, ...]:
    """What the backward of a layer re-runs under op-level selective checkpointing (:func:`sac_matmuls`): every
    elementwise op of the forward (norms, RoPE, activation, residual adds, casts) and the matmuls whose outputs
    were not saved; attention's output is saved (``_save_list`` holds the SDPA kernels)."""
    ops = [op for op in fwd if op.kind == "elementwise"]
    ops += [gemm(f"sac_{name}", "fwd", shard.tokens, n, k, shard.gemm_dtype)
            for name, n, k, saved in sac_matmuls(model, shard) if not saved]
    return tuple(ops)


def _grad_accumulation(shard: Shard, name: str, params: float) -> tuple[ComputeOp, ...]:
    """Adding each micro-batch's weight gradients into the accumulation buffer, when the stack's wgrad GEMMs do not
    accumulate in place (no gradient-accumulation fusion)."""
    nbytes = fz.grad_accumulation_bytes(shard.fusion, shard.act_bytes) * params
    return (elementwise(name, "bwd", nbytes, params, "fp32"),) if nbytes else ()


@lru_cache(maxsize=1024)
def embedding_work(model: Model, shard: Shard) -> Work:
    """Input embedding on the first pipeline stage (vocabulary-parallel lookup, or a patch-embedding GEMM)."""
    if shard.summa:
        from trainsim.workload.summa import summa_embedding_work

        return summa_embedding_work(model, shard)
    h, tp = model.hidden_size, shard.tp
    t = shard.tokens
    e = shard.act_bytes
    if model.input_embedding == "patch":
        f, _d, w = gemm_with_grads("patch_embed", t, h, model.vocab_size, shard.gemm_dtype)
        fwd: tuple[ComputeOp, ...] = (f, _ew(shard, "embed_dropout", "fwd", (2 * e + 1) * t * h))
        return Work(fwd, (w, _ew(shard, "embed_dropout_grad", "bwd", (2 * e + 1) * t * h)))
    n = t * h
    fwd = (_ew(shard, "embedding_lookup", "fwd", 3 * e * n),)
    if model.hidden_dropout > 0 and shard.fusion.dropout:
        fwd += (_ew(shard, "embed_dropout", "fwd", (2 * e + 1) * shard.elementwise_tokens * h),)
    bwd = (_ew(shard, "embedding_grad", "bwd", (2 * e + 4) * n),
           *_grad_accumulation(shard, "embedding_grad_accumulation", model.padded_vocab_size(tp) // tp * h))
    comm_fwd: tuple[CommOp, ...] = ()
    comm_bwd: tuple[CommOp, ...] = ()
    if tp > 1:  # vocabulary-parallel embedding: partial sums are reduced (scattered with sequence parallelism)
        kind: Collective = "reduce_scatter" if shard.sequence_parallel else "all_reduce"
        comm_fwd = (CommOp("embedding_reduce", kind, Group.TP, "fwd", n * e, anchor=fwd[0]),)  # after the lookup
        if shard.sequence_parallel:
            comm_bwd = (CommOp("embedding_grad_gather", "all_gather", Group.TP, "bwd", n * e, anchor=bwd[0],
                               before=True),)
    return Work(fwd, bwd, (), comm_fwd, comm_bwd)


@lru_cache(maxsize=1024)
def head_work(model: Model, shard: Shard) -> Work:
    """Final norm, output projection (LM head) and vocabulary-parallel cross-entropy on the last stage, followed by
    the multi-token-prediction modules (Megatron-Core places them on the last stage)."""
    if shard.summa:
        from trainsim.workload.summa import summa_head_work

        return summa_head_work(model, shard)
    main = _head(model, shard, "")
    if not model.mtp_num_layers:
        return main
    parts = [main]
    for depth in range(model.mtp_num_layers):
        parts.append(_mtp_module(model, shard, depth))
    return Work(
        tuple(op for w in parts for op in w.fwd), tuple(op for w in reversed(parts) for op in w.bwd),
        tuple(op for w in parts for op in w.recompute), tuple(op for w in parts for op in w.comm_fwd),
        tuple(op for w in reversed(parts) for op in w.comm_bwd), tuple(op for w in parts for op in w.comm_recompute),
        tags=("mtp",),
    )


def _mtp_module(model: Model, shard: Shard, depth: int) -> Work:
    """One MTP depth (DeepSeek-V3 §2.2): RMSNorm of the previous hidden state and of the next token's embedding, the
    ``2h → h`` projection, one transformer layer (MoE for MoE models), and its own output head and loss (the
    embedding and head weights are shared with the main model)."""
    h, t = model.hidden_size, shard.tokens
    e = shard.act_bytes
    pre_f: list[ComputeOp] = []
    pre_b: list[ComputeOp] = []
    for name in ("mtp_enorm", "mtp_hnorm"):
        f, b = _norm(name, shard, h, model.normalization == "RMSNorm")
        pre_f.append(f)
        pre_b.append(b)
    pre_f.append(_ew(shard, "mtp_embedding_lookup", "fwd", 3 * e * t * h))
    p_f, p_d, p_w = gemm_with_grads("mtp_eh_proj", t, h // shard.tp, 2 * h, shard.gemm_dtype)
    pre_f += [*_casts(shard, t * 2 * h), p_f]
    pre_b += [*_grad_casts(shard, t * h // shard.tp), p_d, p_w]
    layer = layer_work(model, shard, model.is_moe)
    out = _head(model, shard, "mtp_")
    rename = f"mtp{depth}_" if depth else ""

    def tag(ops: tuple[ComputeOp, ...] | list[ComputeOp]) -> tuple[ComputeOp, ...]:
        return tuple(dataclasses.replace(op, name=rename + op.name) for op in ops) if rename else tuple(ops)

    return Work(tag(pre_f) + layer.fwd + out.fwd, out.bwd + layer.bwd + tag(pre_b), layer.recompute,
                layer.comm_fwd + out.comm_fwd, out.comm_bwd + layer.comm_bwd, layer.comm_recompute)


def _head(model: Model, shard: Shard, prefix: str) -> Work:
    h, tp = model.hidden_size, shard.tp
    t = shard.tokens
    v = model.padded_vocab_size(tp) // tp
    e = shard.act_bytes
    ln_f, ln_b = _norm(f"{prefix}final_norm", shard, h, model.normalization == "RMSNorm")
    f, d, w = gemm_with_grads(f"{prefix}lm_head", t, v, h,
                              "bf16" if shard.gemm_dtype in LOW_PRECISION else shard.gemm_dtype)
    logits = t * v
    # cross-entropy: cast logits to fp32, max, sum-exp, gather target (≈ 4 fp32 passes); backward writes grads
    cf, cb = fz.cross_entropy_bytes(shard.fusion, e)
    ce_f = _ew(shard, f"{prefix}cross_entropy", "fwd", cf * logits, 4.0 * logits)
    ce_b = _ew(shard, f"{prefix}cross_entropy_grad", "bwd", cb * logits, 3.0 * logits)
    metrics = (_ew(shard, f"{prefix}train_metrics", "fwd", fz.metric_bytes(shard.fusion, e) * logits,
                   4.0 * logits * shard.fusion.metric_passes),) if shard.fusion.metric_passes else ()
    comm_fwd = _tp_comm(shard, h, f"{prefix}head_in", True, (f, d, w))
    comm_bwd = _tp_comm_bwd(shard, h, f"{prefix}head_in", True, (f, d, w))
    acc = _grad_accumulation(shard, f"{prefix}lm_head_grad_accumulation", v * h) \
        if model.untie_embeddings_and_output_weights and not prefix else ()
    return Work((ln_f, f, ce_f, *metrics), (ce_b, d, w, ln_b, *acc), (), comm_fwd, comm_bwd)
