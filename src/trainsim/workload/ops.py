"""Operator descriptions: what one GPU computes or communicates, with shapes, FLOPs and bytes (no times).

Ops are plain frozen dataclasses so that they hash (cost tables and caches key on them) and cost nothing to build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OpKind = Literal["gemm", "attention", "elementwise"]
Phase = Literal["fwd", "bwd"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
Group = Literal["tp", "cp", "ep", "etp", "edp", "dp", "pp", "dp_cp", "embedding", "world"]

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class ComputeOp:
    """One kernel (or fused group) on one GPU for one micro-batch.

    GEMMs carry ``(batch, m, n, k)``: ``batch`` independent products of an ``m×k`` by a ``k×n`` matrix.
    Attention carries ``(batch, heads, seq_q, seq_kv, head_dim, causal)`` in ``attn``. ``flops`` counts the work
    actually executed (a masked-out causal half is skipped only by fused attention kernels).
    """

    name: str
    kind: OpKind
    phase: Phase
    flops: float
    bytes: float
    dtype: str = "bf16"
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    attn: tuple[int, int, int, int, int, bool] | None = None

    @property
    def key(self) -> tuple[object, ...]:
        """Identity for measured cost tables: name, phase, shape, dtype."""
        if self.kind == "gemm":
            shape: tuple[object, ...] = (self.batch, self.m, self.n, self.k)
        elif self.kind == "attention":
            shape = tuple(self.attn or ())
        else:
            shape = (int(self.bytes),)
        return (self.name, self.phase, self.kind, shape, self.dtype)


@dataclass(frozen=True, slots=True)
class CommOp:
    """One collective on one GPU. ``nbytes`` follows nccl-tests: the buffer size ``S`` of the operation
    (all-reduce: the reduced buffer; all-gather: the gathered output; reduce-scatter: the input; all-to-all: the
    send buffer; send/recv: the message)."""

    name: str
    collective: Collective
    group: Group
    phase: Phase
    nbytes: float
    hide_behind: str = ""  # name of the compute op this collective can run under ("" = none)
    always_overlapped: bool = False  # the framework always overlaps it (else only with --tp-comm-overlap)


def gemm(name: str, phase: Phase, m: int, n: int, k: int, dtype: str, batch: int = 1,
         out_bytes: float = 2.0) -> ComputeOp:
    """A (batched) GEMM ``C[m,n] = A[m,k] · B[k,n]``: 2·m·n·k FLOPs; reads A and B, writes C."""
    size = DTYPE_BYTES[dtype]
    nbytes = batch * ((m * k + k * n) * size + m * n * out_bytes)
    return ComputeOp(name, "gemm", phase, 2.0 * batch * m * n * k, nbytes, dtype, batch, m, n, k)


def gemm_with_grads(name: str, m: int, n: int, k: int, dtype: str, batch: int = 1) -> tuple[ComputeOp, ...]:
    """Forward ``Y[m,n] = X[m,k]·W[k,n]`` and its two backward GEMMs (data and weight gradients)."""
    return (
        gemm(name, "fwd", m, n, k, dtype, batch),
        gemm(f"{name}_dgrad", "bwd", m, k, n, dtype, batch),
        gemm(f"{name}_wgrad", "bwd", k, n, m, dtype, batch, out_bytes=4.0),
    )


def elementwise(name: str, phase: Phase, nbytes: float, flops: float = 0.0, dtype: str = "bf16") -> ComputeOp:
    """A memory-bound kernel moving ``nbytes`` through HBM, on tensors of ``dtype``."""
    return ComputeOp(name, "elementwise", phase, flops, nbytes, dtype)


def attention(name: str, phase: Phase, batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int,
              causal: bool, dtype: str = "bf16") -> ComputeOp:
    """Fused (Flash) attention. Forward: QKᵀ and PV, 4·b·a·s_q·s_kv·d FLOPs, halved by a causal mask.
    Backward: five matrix products (S recomputed), 2.5× the forward."""
    fwd = 4.0 * batch * heads * seq_q * seq_kv * head_dim * (0.5 if causal else 1.0)
    flops = fwd if phase == "fwd" else 2.5 * fwd
    size = DTYPE_BYTES[dtype]
    io = batch * heads * head_dim * (seq_q * 2 + seq_kv * 2) * size  # Q, O (+K, V) once; dO, dQ... similar
    nbytes = io if phase == "fwd" else 2.5 * io
    return ComputeOp(name, "attention", phase, flops, nbytes, dtype,
                     attn=(batch, heads, seq_q, seq_kv, head_dim, causal))
