"""The work of one micro-batch on one GPU: a transformer layer, the input embedding and the output head.

Shapes follow Megatron-LM's tensor-parallel layout (column-parallel QKV/FC1, row-parallel projection/FC2), with
sequence parallelism (norms and dropouts on s/tp tokens, all-gather / reduce-scatter instead of all-reduce), context
parallelism (s/cp local queries attending to all keys through a KV ring), GQA, SwiGLU and mixture of experts.
Activations are 16-bit (fp32 for ``precision='fp32'``); with ``precision='fp8'`` GEMMs run in FP8 and pay
activation casts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from trainsim.spec.training import element_bytes
from trainsim.workload.ops import DTYPE_BYTES, CommOp, ComputeOp, Phase, attention, elementwise, gemm, gemm_with_grads

if TYPE_CHECKING:
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model


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
    attention: str = "flash"
    recompute: str = "none"

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
        """Data type of the GEMMs."""
        return "tf32" if self.precision == "fp32" else self.precision

    @property
    def act_bytes(self) -> float:
        """Bytes per activation element."""
        return element_bytes(self.precision)

    def p2p_bytes(self, hidden_size: int) -> float:
        """Bytes of one pipeline transfer (activation or its gradient) of this micro-batch: ``tokens·h/tp``
        elements per GPU (each TP rank sends its share)."""
        return self.tokens * hidden_size * self.act_bytes / self.tp

    @property
    def act_dtype(self) -> str:
        """Data type of activations (FP8 jobs keep 16-bit activations)."""
        return {"fp32": "fp32", "fp16": "fp16"}.get(self.precision, "bf16")

    @property
    def attention_dtype(self) -> str:
        """Data type of the attention kernels (TF32 tensor cores for fp32 jobs, 16-bit otherwise)."""
        return {"fp32": "tf32", "fp16": "fp16"}.get(self.precision, "bf16")


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
        attention=tr.attention,
        recompute=tr.recompute_granularity,
    )


def _ew(shard: Shard, name: str, phase: Phase, nbytes: float, flops: float = 0.0) -> ComputeOp:
    """A memory-bound op on this shard's activations."""
    return elementwise(name, phase, nbytes, flops, shard.act_dtype)


def _casts(shard: Shard, elements: float) -> list[ComputeOp]:
    """FP8 quantization of a GEMM input (read 16-bit, write FP8 and its transpose)."""
    if shard.precision != "fp8":
        return []
    return [_ew(shard, "fp8_cast", "fwd", elements * 4.0)]


def _norm(name: str, shard: Shard, h: int) -> tuple[ComputeOp, ComputeOp]:
    n = shard.elementwise_tokens * h
    e = shard.act_bytes
    return _ew(shard, name, "fwd", 2 * e * n, 5.0 * n), _ew(shard, f"{name}_grad", "bwd", 3 * e * n, 8.0 * n)


def _dropout_add(name: str, shard: Shard, h: int) -> tuple[ComputeOp, ComputeOp]:
    """Fused bias + dropout + residual add: read two tensors, write one, keep a 1-byte mask."""
    n = shard.elementwise_tokens * h
    e = shard.act_bytes
    return _ew(shard, name, "fwd", (3 * e + 1) * n), _ew(shard, f"{name}_grad", "bwd", (3 * e + 1) * n)


def _tp_comm(shard: Shard, h: int, name: str, entering: bool, gemm_name: str) -> tuple[CommOp, ...]:
    """Forward TP collective around a column-parallel (``entering``) or row-parallel linear ``gemm_name``.

    With ``--tp-comm-overlap`` (TE userbuffers) the all-gather/reduce-scatter hides behind that GEMM.
    """
    if shard.tp == 1:
        return ()
    size = shard.tokens * h * shard.act_bytes
    if shard.sequence_parallel:
        kind = "all_gather" if entering else "reduce_scatter"
        return (CommOp(name, kind, "tp", "fwd", size, gemm_name),)  # type: ignore[arg-type]
    if entering:
        return ()  # identity in forward, all-reduce in backward
    return (CommOp(name, "all_reduce", "tp", "fwd", size),)


def _tp_comm_bwd(shard: Shard, h: int, name: str, entering: bool, gemm_name: str) -> tuple[CommOp, ...]:
    """Backward mirror of :func:`_tp_comm`.

    Megatron always overlaps the input-gradient reduction of a column-parallel linear with its weight-gradient GEMM,
    and (with sequence parallelism) the re-gather of its input with the data-gradient GEMM.
    """
    if shard.tp == 1:
        return ()
    size = shard.tokens * h * shard.act_bytes
    if entering:
        kind = "reduce_scatter" if shard.sequence_parallel else "all_reduce"
        ops = [CommOp(f"{name}_grad", kind, "tp", "bwd", size, f"{gemm_name}_wgrad", True)]  # type: ignore[arg-type]
        if shard.sequence_parallel:
            ops.append(CommOp(f"{name}_regather", "all_gather", "tp", "bwd", size, f"{gemm_name}_dgrad", True))
        return tuple(ops)
    if shard.sequence_parallel:
        return (CommOp(f"{name}_grad", "all_gather", "tp", "bwd", size, f"{gemm_name}_dgrad"),)
    return ()


def _attention_block(model: Model, shard: Shard) -> Work:
    b, s, tp, cp = shard.micro_batch, shard.seq, shard.tp, shard.cp
    h, d = model.hidden_size, model.head_dim
    heads = model.num_attention_heads // tp
    groups = model.query_groups // tp
    t = shard.tokens
    e = shard.act_bytes
    dt = shard.gemm_dtype
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    core_fwd: list[ComputeOp] = []
    core_bwd: list[ComputeOp] = []

    ln_f, ln_b = _norm("input_norm", shard, h)
    fwd.append(ln_f)
    bwd.append(ln_b)
    fwd += _casts(shard, t * h)
    q_f, q_d, q_w = gemm_with_grads("qkv", t, (heads + 2 * groups) * d, h, dt)
    fwd.append(q_f)
    bwd += [q_d, q_w]
    if model.position_embedding_type == "rope":
        n = t * (heads + groups) * d
        fwd.append(_ew(shard, "rope", "fwd", 2 * e * n, 3.0 * n))
        bwd.append(_ew(shard, "rope_grad", "bwd", 2 * e * n, 3.0 * n))
    if shard.attention == "flash":
        seq_q = s // cp
        adt = shard.attention_dtype
        core_fwd.append(attention("flash_attn", "fwd", b, heads, seq_q, s, d, model.causal, adt))
        core_bwd.append(attention("flash_attn_grad", "bwd", b, heads, seq_q, s, d, model.causal, adt))
    else:
        # Megatron's unfused core attention: QKᵀ and AV as batched GEMMs over all s² scores (the causal mask does
        # not save work), fused scale-mask-softmax and attention dropout as memory-bound kernels.
        scores = b * heads * s * s
        core_fwd.append(gemm("attn_qk", "fwd", s, s, d, "bf16" if dt == "fp8" else dt, batch=b * heads))
        core_fwd.append(_ew(shard, "softmax", "fwd", 2 * e * scores, 5.0 * scores))
        core_fwd.append(_ew(shard, "attn_dropout", "fwd", (2 * e + 1) * scores))
        core_fwd.append(gemm("attn_av", "fwd", s, d, s, "bf16" if dt == "fp8" else dt, batch=b * heads))
        gdt = "bf16" if dt == "fp8" else dt
        core_bwd += [
            gemm("attn_av_dgrad", "bwd", s, s, d, gdt, batch=b * heads, grad_of="attn_av"),
            gemm("attn_av_wgrad", "bwd", s, d, s, gdt, batch=b * heads, grad_of="attn_av"),  # of V: no weights
            _ew(shard, "attn_dropout_grad", "bwd", (2 * e + 1) * scores),
            _ew(shard, "softmax_grad", "bwd", 3 * e * scores, 4.0 * scores),
            gemm("attn_qk_dgrad", "bwd", s, d, s, gdt, batch=b * heads, grad_of="attn_qk"),
            gemm("attn_qk_wgrad", "bwd", s, d, s, gdt, batch=b * heads, grad_of="attn_qk"),  # of K: no weights
        ]
    fwd += core_fwd
    bwd += core_bwd
    fwd += _casts(shard, t * heads * d)
    p_f, p_d, p_w = gemm_with_grads("attn_proj", t, h, heads * d, dt)
    fwd.append(p_f)
    bwd += [p_d, p_w]
    da_f, da_b = _dropout_add("attn_bias_dropout_add", shard, h)
    fwd.append(da_f)
    bwd.append(da_b)

    comm_fwd = _tp_comm(shard, h, "attn_in", True, "qkv") + _tp_comm(shard, h, "attn_out", False, "attn_proj")
    comm_bwd = (_tp_comm_bwd(shard, h, "attn_out", False, "attn_proj")
                + _tp_comm_bwd(shard, h, "attn_in", True, "qkv"))
    if cp > 1:
        # Ring attention: cp-1 steps, each passing a K/V block (forward) or K/V plus dK/dV (backward).
        kv_block = 2 * b * (s // cp) * groups * d * e
        ring = "flash_attn"
        comm_fwd += (CommOp("cp_kv_ring", "send_recv", "cp", "fwd", (cp - 1) * kv_block, ring, True),)
        comm_bwd += (CommOp("cp_kv_ring_grad", "send_recv", "cp", "bwd", 2 * (cp - 1) * kv_block, f"{ring}_grad",
                            True),)
    recompute = tuple(core_fwd) if shard.recompute == "selective" and shard.attention == "unfused" else ()
    return Work(tuple(fwd), tuple(bwd), recompute, comm_fwd, comm_bwd)


def _mlp_gemms(name: str, t: int, h: int, ffn: int, swiglu: bool, dt: str, shard: Shard,
               batch: int = 1) -> tuple[list[ComputeOp], list[ComputeOp]]:
    e = shard.act_bytes
    up = 2 * ffn if swiglu else ffn
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    fwd += _casts(shard, batch * t * h)
    f1, d1, w1 = gemm_with_grads(f"{name}_fc1", t, up, h, dt, batch)
    fwd.append(f1)
    bwd += [d1, w1]
    n = batch * t * ffn
    if swiglu:
        fwd.append(_ew(shard, f"{name}_swiglu", "fwd", 3 * e * n, 6.0 * n))
        bwd.append(_ew(shard, f"{name}_swiglu_grad", "bwd", 5 * e * n, 10.0 * n))
    else:
        fwd.append(_ew(shard, f"{name}_bias_gelu", "fwd", 2 * e * n, 10.0 * n))
        bwd.append(_ew(shard, f"{name}_bias_gelu_grad", "bwd", 3 * e * n, 16.0 * n))
    fwd += _casts(shard, n)
    f2, d2, w2 = gemm_with_grads(f"{name}_fc2", t, h, ffn, dt, batch)
    fwd.append(f2)
    bwd += [d2, w2]
    return fwd, bwd


def _mlp_block(model: Model, shard: Shard, moe: bool) -> Work:
    h, tp = model.hidden_size, shard.tp
    t = shard.tokens
    dt = shard.gemm_dtype
    e = shard.act_bytes
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    ln_f, ln_b = _norm("mlp_norm", shard, h)
    fwd.append(ln_f)
    bwd.append(ln_b)
    first_gemm = "mlp_fc1" if not moe else "router"
    comm_fwd: tuple[CommOp, ...] = _tp_comm(shard, h, "mlp_in", True, first_gemm)
    comm_bwd: tuple[CommOp, ...] = ()
    if not moe:
        f, b_ = _mlp_gemms("mlp", t, h, model.ffn_size // tp, model.swiglu, dt, shard)
        fwd += f
        bwd += b_
    else:
        experts = model.num_experts or 1
        k = model.moe_router_topk
        local_experts = experts // shard.ep
        routed = t * k  # token copies this GPU computes, balanced over the EP group
        per_expert = max(1, -(-routed // local_experts))
        r_f, r_d, r_w = gemm_with_grads("router", t, experts, h, "fp32" if dt == "tf32" else "bf16")
        fwd.append(r_f)
        bwd += [r_d, r_w]
        perm = routed * h * e
        fwd.append(_ew(shard, "moe_permute", "fwd", 4 * perm))
        bwd.append(_ew(shard, "moe_permute_grad", "bwd", 4 * perm))
        f, b_ = _mlp_gemms("expert", per_expert, h, model.expert_ffn_size // tp, model.swiglu, dt, shard,
                           batch=local_experts)
        fwd += f
        bwd += b_
        fwd.append(_ew(shard, "moe_unpermute", "fwd", 4 * perm))
        bwd.append(_ew(shard, "moe_unpermute_grad", "bwd", 4 * perm))
        shared = model.moe_shared_expert_intermediate_size or 0
        if shared:
            f, b_ = _mlp_gemms("shared_expert", t, h, shared // tp, model.swiglu, dt, shard)
            fwd += f
            bwd += b_
        if shard.ep > 1:
            a2a = routed * h * e
            comm_fwd += (CommOp("moe_dispatch", "all_to_all", "ep", "fwd", a2a),
                         CommOp("moe_combine", "all_to_all", "ep", "fwd", a2a))
            comm_bwd += (CommOp("moe_combine_grad", "all_to_all", "ep", "bwd", a2a),
                         CommOp("moe_dispatch_grad", "all_to_all", "ep", "bwd", a2a))
    da_f, da_b = _dropout_add("mlp_bias_dropout_add", shard, h)
    fwd.append(da_f)
    bwd.append(da_b)
    last_gemm = "mlp_fc2" if not moe else "expert_fc2"
    comm_fwd += _tp_comm(shard, h, "mlp_out", False, last_gemm)
    comm_bwd = (_tp_comm_bwd(shard, h, "mlp_out", False, last_gemm) + comm_bwd
                + _tp_comm_bwd(shard, h, "mlp_in", True, first_gemm))
    return Work(tuple(fwd), tuple(bwd), (), comm_fwd, comm_bwd)


@lru_cache(maxsize=4096)
def layer_work(model: Model, shard: Shard, moe: bool = False) -> Work:
    """One transformer layer (attention + MLP or MoE) for one micro-batch on one GPU."""
    a = _attention_block(model, shard)
    m = _mlp_block(model, shard, moe)
    fwd = a.fwd + m.fwd
    comm_fwd = a.comm_fwd + m.comm_fwd
    if shard.recompute == "full":
        recompute, comm_re = fwd, comm_fwd
    else:
        recompute, comm_re = a.recompute, ()
    return Work(fwd, m.bwd + a.bwd, recompute, comm_fwd, m.comm_bwd + a.comm_bwd, comm_re,
                tags=("moe",) if moe else ())


@lru_cache(maxsize=1024)
def embedding_work(model: Model, shard: Shard) -> Work:
    """Input embedding on the first pipeline stage (vocabulary-parallel lookup, or a patch-embedding GEMM)."""
    h, tp = model.hidden_size, shard.tp
    t = shard.tokens
    e = shard.act_bytes
    if model.input_embedding == "patch":
        f, _d, w = gemm_with_grads("patch_embed", t, h, model.vocab_size, shard.gemm_dtype)
        fwd: tuple[ComputeOp, ...] = (f, _ew(shard, "embed_dropout", "fwd", (2 * e + 1) * t * h))
        return Work(fwd, (w, _ew(shard, "embed_dropout_grad", "bwd", (2 * e + 1) * t * h)))
    n = t * h
    fwd = (_ew(shard, "embedding_lookup", "fwd", 3 * e * n),
           _ew(shard, "embed_dropout", "fwd", (2 * e + 1) * shard.elementwise_tokens * h))
    bwd = (_ew(shard, "embedding_grad", "bwd", (2 * e + 4) * n),)
    comm_fwd: tuple[CommOp, ...] = ()
    comm_bwd: tuple[CommOp, ...] = ()
    if tp > 1:  # vocabulary-parallel embedding: partial sums are reduced (scattered with sequence parallelism)
        kind = "reduce_scatter" if shard.sequence_parallel else "all_reduce"
        comm_fwd = (CommOp("embedding_reduce", kind, "tp", "fwd", n * e),)  # type: ignore[arg-type]
        if shard.sequence_parallel:
            comm_bwd = (CommOp("embedding_grad_gather", "all_gather", "tp", "bwd", n * e),)
    return Work(fwd, bwd, (), comm_fwd, comm_bwd)


@lru_cache(maxsize=1024)
def head_work(model: Model, shard: Shard) -> Work:
    """Final norm, output projection (LM head) and vocabulary-parallel cross-entropy on the last stage."""
    h, tp = model.hidden_size, shard.tp
    t = shard.tokens
    v = model.padded_vocab_size(tp) // tp
    e = shard.act_bytes
    ln_f, ln_b = _norm("final_norm", shard, h)
    f, d, w = gemm_with_grads("lm_head", t, v, h, "bf16" if shard.gemm_dtype == "fp8" else shard.gemm_dtype)
    logits = t * v
    # cross-entropy: cast logits to fp32, max, sum-exp, gather target (≈ 4 fp32 passes); backward writes grads
    ce_f = _ew(shard, "cross_entropy", "fwd", (e + 4 * DTYPE_BYTES["fp32"]) * logits, 4.0 * logits)
    ce_b = _ew(shard, "cross_entropy_grad", "bwd", (2 * DTYPE_BYTES["fp32"] + e) * logits, 3.0 * logits)
    comm_fwd = _tp_comm(shard, h, "head_in", True, "lm_head")
    comm_bwd = _tp_comm_bwd(shard, h, "head_in", True, "lm_head")
    return Work((ln_f, f, ce_f), (ce_b, d, w, ln_b), (), comm_fwd, comm_bwd)
