"""2D tensor parallelism: linear layers on a SUMMA grid (``--tensor-parallel-mode summa``).

The ``tp`` GPUs of a tensor-parallel group form a grid of ``R = tp_rows`` rows and ``C = tp/R`` columns (the NERSC
performance model's 2D TP, Subramanian et al. 2024, arXiv 2410.00273; the algorithm is SUMMA, van de Geijn & Watts
1997, applied to transformers as in Optimus, Xu et al. 2021, arXiv 2104.05343). Every activation ``X[M, K]``
(``M`` tokens of a micro-batch on one context-parallel rank) is split into ``M/R × K/C`` blocks and every weight
``W[K, N]`` into ``K/R × N/C`` blocks, so weights **and** activations are divided by ``tp``.

A linear layer ``Y = X·W`` runs in ``nb`` (``--summa-blocks``) steps over panels of the inner dimension ``K``:
grid row ``i`` broadcasts the activation panel ``X[i, p]`` (``M/R × K/nb``) over its row group (``tp_row``, ``C``
GPUs), grid column ``j`` the weight panel ``W[p, j]`` (``K/nb × N/C``) over its column group (``tp_col``, ``R``
GPUs), and every GPU adds the ``M/R × N/C × K/nb`` block product. The broadcasts of panel ``p + 1`` run while the GEMM
of panel ``p`` computes, so per linear layer the exposed communication is the first panel's broadcasts plus what
each later panel's broadcasts outlast the previous GEMM block: ``c + (nb − 1)·max(0, c − g)`` with ``c`` the
broadcast time and ``g`` the GEMM time of one panel.

Per GPU and linear layer the buffers moved are (``e`` bytes per element, summed over the panels):

=============  =================================================  ===============================================
pass           row group (``C`` GPUs)                              column group (``R`` GPUs)
=============  =================================================  ===============================================
forward        broadcast ``X``: ``M·K·e/R``                        broadcast ``W``: ``K·N·e/C``
backward       broadcast ``X`` (for ``dW = Xᵀ·dY``) and reduce      broadcast ``W`` (for ``dX = dY·Wᵀ``) and reduce
               the ``dX`` partial sums: ``2·M·K·e/R``              the ``dW`` partial sums: ``2·K·N·e/C``
=============  =================================================  ===============================================

so the backward moves twice the forward volume (Optimus §3.2). The backward pass pipelines its ``2·nb`` GEMM blocks
(``nb`` data-gradient, then ``nb`` weight-gradient blocks) the same way: a block's operand broadcast hides behind the
previous block, its reduction behind the next; the first broadcast and the last reduction are exposed. 1D tensor
parallelism (Megatron) instead all-gathers / reduce-scatters the whole activation ``M·K·e`` over all ``tp`` GPUs and
never moves weights: SUMMA wins when activations are large against weights (long sequences: the NERSC ViT on ERA5)
and loses when weights dominate (GPT-3 1T, 2048 tokens).

Attention: the query, key and value blocks hold ``M/R`` tokens of ``heads/C`` heads; the keys and values are
all-gathered over the column group (the rows split the sequence) so every GPU attends its ``M/R`` queries to the
whole sequence — with ``cp > 1`` the context-parallel ring then passes the gathered blocks on (the NERSC
"2D TP + sequence" variant: the sequence is split over the grid rows and over ``cp``). Norms and dropouts see
``M/R × h/C`` elements (their statistics are all-reduced over the row group); the embedding is a ``V/R × h/C`` block
per GPU, looked up for the micro-batch and reduce-scattered over the column group; the output layer and the
patch embedding are SUMMA linear layers.

Scope: dense models with standard (or grouped-query) attention; mixture of experts, MLA and multi-token prediction
keep 1D tensor parallelism (:func:`check_summa` says so).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError
from trainsim.workload import fusion as fz
from trainsim.workload.layers import (
    Shard,
    Work,
    _casts,
    _dropout_add,
    _ew,
    _grad_accumulation,
    _grad_casts,
    _norm,
    activation_ops,
    core_attention,
)
from trainsim.workload.ops import LOW_PRECISION, CommOp, ComputeOp, Group, Overlap, Phase, Role, gemm

if TYPE_CHECKING:
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model


@dataclass(frozen=True, slots=True)
class SummaVolume:
    """Bytes one GPU moves for one linear layer and one micro-batch (buffer sizes summed over the panels)."""

    fwd_row: float
    fwd_col: float
    bwd_row: float
    bwd_col: float

    @property
    def forward(self) -> float:
        """Forward bytes (both groups)."""
        return self.fwd_row + self.fwd_col

    @property
    def backward(self) -> float:
        """Backward bytes (both groups)."""
        return self.bwd_row + self.bwd_col


def linear_volume(tokens: float, n: int, k: int, rows: int, cols: int, elem_bytes: float) -> SummaVolume:
    """Per-GPU SUMMA traffic of ``Y[M, N] = X[M, K]·W[K, N]`` on a ``rows × cols`` grid (see the module table)."""
    x = tokens * k * elem_bytes / rows
    w = k * n * elem_bytes / cols
    return SummaVolume(x, w, 2 * x, 2 * w)


def one_d_volume(tokens: float, k: int, elem_bytes: float) -> float:
    """Bytes of the activation collective that 1D tensor parallelism with sequence parallelism runs per linear layer
    and pass (an all-gather or reduce-scatter of the ``M × K`` activation, nccl-tests buffer size)."""
    return tokens * k * elem_bytes


def pipelined_exposed(comm: float, compute: float, blocks: int) -> float:
    """Exposed seconds of ``blocks`` pipelined panels, each ``comm`` seconds of broadcasts and ``compute`` of GEMM:
    the first panel's broadcasts, then what every later one outlasts the previous GEMM block."""
    return comm + (blocks - 1) * max(0.0, comm - compute)


def _split(size: int, parts: int) -> int:
    return max(1, math.ceil(size / parts))


@dataclass(frozen=True, slots=True)
class SummaLinear:
    """The GEMM blocks and panel collectives of one SUMMA linear layer."""

    fwd: tuple[ComputeOp, ...]
    bwd: tuple[ComputeOp, ...]
    comm_fwd: tuple[CommOp, ...]
    comm_bwd: tuple[CommOp, ...]


def _block_name(name: str, p: int) -> str:
    return name if p == 0 else f"{name}#{p}"


def _pipeline(gemms: list[ComputeOp], pre: list[list[CommOp]], post: list[list[CommOp]]) -> list[CommOp]:
    """Attach each GEMM block's operand collectives (``pre[q]``: before block ``q``, hidden behind block ``q − 1``)
    and result reductions (``post[q]``: after it, hidden behind block ``q + 1``). The first block's operands and the
    last block's reductions have no neighbour to hide behind and are exposed."""
    out: list[CommOp] = []
    n = len(gemms)
    for q, ops in enumerate(pre):
        out += [_at(c, gemms[q - 1], True) if q else _at(c, gemms[0], False) for c in ops]
    for q, ops in enumerate(post):
        out += [_at(c, gemms[q + 1], True) if q < n - 1 else _at(c, gemms[-1], False) for c in ops]
    return out


def _at(op: CommOp, target: ComputeOp, overlapped: bool) -> CommOp:
    """``op`` hidden behind ``target`` (``overlapped``), or blocking at it."""
    return dataclasses.replace(op, overlap=Overlap.COMPUTE if overlapped else Overlap.NONE, behind=target)


def summa_linear(name: str, shard: Shard, tokens: int, n: int, k: int, dtype: str,
                 input_grad: bool = True) -> SummaLinear:
    """``Y[tokens, n] = X[tokens, k]·W[k, n]`` on the shard's grid in ``summa_blocks`` panels (module docstring).

    Block ``p`` of the forward is named ``name`` (``p = 0``) or ``name#p``; the backward's data- and weight-gradient
    blocks ``name_dgrad[#p]`` and ``name_wgrad[#p]``. ``input_grad=False``: no data gradient (the input is data).
    """
    rows, cols, nb = shard.tp_rows, shard.tp_cols, shard.summa_blocks
    e = shard.act_bytes
    m = _split(tokens, rows)
    kb, nc = _split(k, nb), _split(n, cols)
    fwd = [gemm(_block_name(name, p), "fwd", m, nc, kb, dtype) for p in range(nb)]
    x_panel, w_panel = m * kb * e, kb * nc * e
    comm_fwd = _pipeline(fwd, [[CommOp(f"{op.name}_bcast_x", "broadcast", Group.TP_ROW, "fwd", x_panel),
                                CommOp(f"{op.name}_bcast_w", "broadcast", Group.TP_COL, "fwd", w_panel)] for op in fwd],
                         [[] for _ in fwd])
    dgrad = [gemm(_block_name(f"{name}_dgrad", p), "bwd", m, kb, nc, dtype, role=Role.INPUT_GRAD, grad_of=name)
             for p in range(nb)] if input_grad else []
    wgrad = [gemm(_block_name(f"{name}_wgrad", p), "bwd", kb, nc, m, dtype, out_bytes=4.0, role=Role.WEIGHT_GRAD,
                  grad_of=name) for p in range(nb)]
    gemms = dgrad + wgrad
    pre = [[CommOp(f"{op.name}_bcast_w", "broadcast", Group.TP_COL, "bwd", w_panel)] for op in dgrad]
    pre += [[CommOp(f"{op.name}_bcast_x", "broadcast", Group.TP_ROW, "bwd", x_panel)] for op in wgrad]
    post = [[CommOp(f"{op.name}_reduce", "reduce", Group.TP_ROW, "bwd", x_panel)] for op in dgrad]
    post += [[CommOp(f"{op.name}_reduce", "reduce", Group.TP_COL, "bwd", w_panel)] for op in wgrad]
    comm_bwd = _pipeline(gemms, pre, post)
    return SummaLinear(tuple(fwd), tuple(gemms), tuple(comm_fwd), tuple(comm_bwd))


def _norm_stats(name: str, shard: Shard, target: ComputeOp, phase: Phase) -> CommOp:
    """All-reduce of per-token statistics over the row group (features are split over the columns): mean and
    variance forward, the two sums of the gradient backward (fp32)."""
    m = _split(shard.tokens, shard.tp_rows)
    return CommOp(name, "all_reduce", Group.TP_ROW, phase, m * 2 * 4.0, behind=target)


def _kv_heads(model: Model, shard: Shard) -> tuple[int, int]:
    return model.num_attention_heads // shard.tp_cols, model.query_groups // shard.tp_cols


@lru_cache(maxsize=1024)
def summa_layer_work(model: Model, shard: Shard) -> Work:
    """One dense transformer layer for one micro-batch on one GPU of the SUMMA grid."""
    t, h, d = shard.tokens, model.hidden_size, model.head_dim
    dt, e = shard.gemm_dtype, shard.act_bytes
    rows, cols = shard.tp_rows, shard.tp_cols
    heads, groups = _kv_heads(model, shard)
    m = _split(t, rows)
    b, cp = shard.micro_batch, shard.cp
    rms = model.normalization == "RMSNorm"
    fwd: list[ComputeOp] = []
    bwd: list[ComputeOp] = []
    comm_fwd: list[CommOp] = []
    comm_bwd: list[CommOp] = []

    def linear(name: str, n: int, k: int) -> None:
        lin = summa_linear(name, shard, t, n, k, dt)
        fwd.extend(_casts(shard, t * k / shard.tp))
        fwd.extend(lin.fwd)
        bwd.extend((*_grad_casts(shard, t * n / shard.tp), *lin.bwd))
        comm_fwd.extend(lin.comm_fwd)
        comm_bwd.extend(lin.comm_bwd)

    def norm(name: str) -> None:
        f, g = _norm(name, shard, h, rms)
        fwd.append(f)
        bwd.append(g)
        comm_fwd.append(_norm_stats(f"{name}_stats", shard, f, "fwd"))
        comm_bwd.append(_norm_stats(f"{name}_stats_grad", shard, g, "bwd"))

    # attention block
    norm("input_norm")
    linear("qkv", (model.num_attention_heads + 2 * model.query_groups) * d, h)
    n_qk = m * (heads + groups) * d
    if model.qk_layernorm:
        fwd.append(_ew(shard, "qk_norm", "fwd", 2 * e * n_qk, 5.0 * n_qk))
        bwd.append(_ew(shard, "qk_norm_grad", "bwd", 3 * e * n_qk, 8.0 * n_qk))
    if model.position_embedding_type == "rope":
        rf, rb = fz.rope_bytes(shard.fusion, e)
        fwd.append(_ew(shard, "rope", "fwd", rf * n_qk, 3.0 * n_qk))
        bwd.append(_ew(shard, "rope_grad", "bwd", rb * n_qk, 3.0 * n_qk))
    s = shard.seq
    seq_q = _split(s // cp, rows)
    seq_kv = max(1, round(s * model.attention_span(s))) if model.causal else s
    core_fwd, core_bwd = core_attention(shard, model, b, heads, d, dt, seq_q, seq_kv)
    first_core, first_core_grad = core_fwd[0], core_bwd[0]
    fwd += core_fwd
    bwd += core_bwd
    if rows > 1:  # the rows split the sequence: every GPU needs the keys and values of the whole (cp-local) sequence
        kv = 2 * t * groups * d * e
        comm_fwd.append(CommOp("attn_kv_gather", "all_gather", Group.TP_COL, "fwd", kv, behind=first_core))
        comm_bwd.append(CommOp("attn_kv_regather", "all_gather", Group.TP_COL, "bwd", kv, behind=first_core_grad))
        comm_bwd.append(CommOp("attn_kv_grad", "reduce_scatter", Group.TP_COL, "bwd", kv, behind=bwd[-1]))
    if cp > 1:  # ring attention over the context-parallel group, on the blocks gathered over the rows
        kv_block = 2 * b * (s // cp) * groups * d * e
        comm_fwd.append(CommOp("cp_kv_ring", "send_recv", Group.CP, "fwd", (cp - 1) * kv_block, Overlap.COMPUTE,
                               first_core))
        comm_bwd.append(CommOp("cp_kv_ring_grad", "send_recv", Group.CP, "bwd", 2 * (cp - 1) * kv_block,
                               Overlap.COMPUTE, first_core_grad))
    linear("attn_proj", h, model.num_attention_heads * model.v_dim)
    da_f, da_b = _dropout_add("attn_bias_dropout_add", shard, model)
    fwd.append(da_f)
    bwd.append(da_b)
    # MLP block
    norm("mlp_norm")
    up = 2 * model.ffn_size if model.swiglu else model.ffn_size
    linear("mlp_fc1", up, h)
    n_act = m * _split(model.ffn_size, cols)
    act_f, act_b = activation_ops(shard, "mlp", n_act, model.mlp_activation, model.add_bias_linear)
    fwd.append(act_f)
    bwd.append(act_b)
    linear("mlp_fc2", h, model.ffn_size)
    da_f, da_b = _dropout_add("mlp_bias_dropout_add", shard, model)
    fwd.append(da_f)
    bwd.append(da_b)
    acc = _grad_accumulation(shard, "layer_grad_accumulation", (model.attention_params + model.dense_mlp_params)
                             / shard.tp)
    if shard.recompute == "full":
        recompute, comm_re = tuple(fwd), tuple(comm_fwd)
    elif shard.recompute == "selective" and shard.attention != "flash":
        recompute, comm_re = tuple(core_fwd), ()
    else:
        recompute, comm_re = (), ()
    return Work(tuple(fwd), tuple(bwd) + acc, recompute, tuple(comm_fwd), tuple(comm_bwd), comm_re)


@lru_cache(maxsize=256)
def summa_embedding_work(model: Model, shard: Shard) -> Work:
    """Input embedding on the grid: a SUMMA patch-embedding GEMM, or the lookup of the micro-batch in this GPU's
    ``V/R × h/C`` block of the table with the partial rows reduce-scattered over the column group."""
    h, t, e = model.hidden_size, shard.tokens, shard.act_bytes
    n_local = t * h / shard.tp
    if model.input_embedding == "patch":
        lin = summa_linear("patch_embed", shard, t, h, model.vocab_size, shard.gemm_dtype, input_grad=False)
        fwd = (*lin.fwd, _ew(shard, "embed_dropout", "fwd", (2 * e + 1) * n_local))
        bwd = (*lin.bwd, _ew(shard, "embed_dropout_grad", "bwd", (2 * e + 1) * n_local))
        return Work(fwd, bwd, (), lin.comm_fwd, lin.comm_bwd)
    gathered = t * h / shard.tp_cols  # all tokens of the micro-batch, this column's features
    fwd_ops: tuple[ComputeOp, ...] = (_ew(shard, "embedding_lookup", "fwd", 3 * e * gathered),)
    if model.hidden_dropout > 0 and shard.fusion.dropout:
        fwd_ops += (_ew(shard, "embed_dropout", "fwd", (2 * e + 1) * n_local),)
    table = model.padded_vocab_size(shard.tp) // shard.tp * h
    bwd_ops = (_ew(shard, "embedding_grad", "bwd", (2 * e + 4) * gathered),
               *_grad_accumulation(shard, "embedding_grad_accumulation", table))
    comm_f: tuple[CommOp, ...] = ()
    comm_b: tuple[CommOp, ...] = ()
    if shard.tp_rows > 1:
        comm_f = (CommOp("embedding_reduce", "reduce_scatter", Group.TP_COL, "fwd", gathered * e,
                         anchor=fwd_ops[0]),)  # after the lookup
        comm_b = (CommOp("embedding_grad_gather", "all_gather", Group.TP_COL, "bwd", gathered * e, anchor=bwd_ops[0],
                         before=True),)
    return Work(fwd_ops, bwd_ops, (), comm_f, comm_b)


@lru_cache(maxsize=256)
def summa_head_work(model: Model, shard: Shard) -> Work:
    """Final norm, the output layer as a SUMMA linear layer, and the cross-entropy over this GPU's ``V/C`` logits
    (its maximum and sum of exponentials all-reduced over the row group)."""
    h, t, e = model.hidden_size, shard.tokens, shard.act_bytes
    v = model.padded_vocab_size(shard.tp)
    ln_f, ln_b = _norm("final_norm", shard, h, model.normalization == "RMSNorm")
    dt = "bf16" if shard.gemm_dtype in LOW_PRECISION else shard.gemm_dtype
    lin = summa_linear("lm_head", shard, t, v, h, dt)
    logits = t * v / shard.tp
    cf, cb = fz.cross_entropy_bytes(shard.fusion, e)
    ce_f = _ew(shard, "cross_entropy", "fwd", cf * logits, 4.0 * logits)
    ce_b = _ew(shard, "cross_entropy_grad", "bwd", cb * logits, 3.0 * logits)
    m = _split(t, shard.tp_rows)
    comm_f = (_norm_stats("final_norm_stats", shard, ln_f, "fwd"), *lin.comm_fwd,
              CommOp("cross_entropy_stats", "all_reduce", Group.TP_ROW, "fwd", m * 3 * 4.0, behind=ce_f))
    comm_b = (*lin.comm_bwd, _norm_stats("final_norm_stats_grad", shard, ln_b, "bwd"))
    acc = _grad_accumulation(shard, "lm_head_grad_accumulation", v / shard.tp * h) \
        if model.untie_embeddings_and_output_weights else ()
    return Work((ln_f, *lin.fwd, ce_f), (ce_b, *lin.bwd, ln_b, *acc), (), comm_f, comm_b)


def workspace_bytes(model: Model, shard: Shard) -> float:
    """Transient bytes of the SUMMA grid on one GPU: the keys and values gathered over the column group for the
    layer in flight, and two buffers (double buffering) of the largest linear layer's activation and weight panels."""
    e = shard.act_bytes
    rows, cols, nb = shard.tp_rows, shard.tp_cols, shard.summa_blocks
    _heads, groups = _kv_heads(model, shard)
    kv = 2 * shard.tokens * groups * model.head_dim * e if rows > 1 else 0.0
    m = _split(shard.tokens, rows)
    up = 2 * model.ffn_size if model.swiglu else model.ffn_size
    panels = max(m * _split(k, nb) + _split(k, nb) * _split(n, cols)
                 for k, n in ((model.hidden_size, up), (model.ffn_size, model.hidden_size))) * e
    return kv + 2 * panels


def check_summa(job: Job) -> None:
    """The plan checks of 2D tensor parallelism (raises :class:`TrainsimError`)."""
    m, par = job.model, job.parallelism
    rows, cols = par.grid
    if m.is_moe or m.multi_latent_attention or m.mtp_num_layers:
        what = "mixture-of-experts" if m.is_moe else ("MLA" if m.multi_latent_attention else "multi-token prediction")
        raise TrainsimError("parallelism.tensor_parallel_mode", f"summa is modelled for dense layers, not {what}",
                            "use --tensor-parallel-mode 1d for this model")
    if m.hidden_size % par.tp:
        raise TrainsimError("parallelism.tp", f"hidden size {m.hidden_size} is not divisible by tp = {par.tp} (the "
                            "SUMMA grid splits it over rows and columns)", "choose tp dividing the hidden size")
    if m.ffn_size % par.tp:
        raise TrainsimError("parallelism.tp", f"FFN size {m.ffn_size} is not divisible by tp = {par.tp}",
                            "choose tp dividing the FFN hidden size")
    comm = job.framework.cp_comm_type or "p2p"
    if par.cp > 1 and comm != "p2p":
        raise TrainsimError("framework.cp_comm_type", f"summa is modelled with ring context parallelism, not {comm}",
                            "use --cp-comm-type p2p with --tensor-parallel-mode summa")
    tokens = job.seq_length // par.cp
    if tokens % rows:
        raise TrainsimError("parallelism.tp_rows", f"the {tokens} tokens per context-parallel rank are not divisible "
                            f"by tp_rows = {rows} (the grid rows split the sequence)",
                            "choose --tp-rows dividing seq_length / cp")
    del cols
