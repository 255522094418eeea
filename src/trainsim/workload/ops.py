"""Operator descriptions: what one GPU computes or communicates, with shapes, FLOPs and bytes (no times).

Ops are plain frozen dataclasses so that they hash (cost tables and caches key on them) and cost nothing to build.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from trainsim.parallel.axes import EXPERT_STREAM_GROUPS, Group

__all__ = [
    "DTYPE_BYTES",
    "Collective",
    "CommOp",
    "ComputeOp",
    "GemmLayout",
    "Group",
    "OpKind",
    "Overlap",
    "Phase",
    "Role",
    "attention",
    "comm_stream",
    "elementwise",
    "exposed_time",
    "gemm",
    "gemm_with_grads",
    "overlap_target",
]

OpKind = Literal["gemm", "attention", "elementwise"]
Phase = Literal["fwd", "bwd"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast", "reduce"]


def comm_stream(group: Group) -> str:
    """The stream a collective of ``group`` queues on inside a layer: ``"ep"`` (token dispatch/combine, expert-TP
    gather/scatter) or ``"comm"`` (every other in-layer collective)."""
    return "ep" if group in EXPERT_STREAM_GROUPS else "comm"

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 0.5 + 1 / 16}
#: GEMM data types of low-precision recipes (the attention and the LM head stay 16-bit).
LOW_PRECISION: frozenset[str] = frozenset({"fp8", "fp4"})


class Role(StrEnum):
    """What a compute op contributes: the forward pass, the input (data) gradient on the critical path of the
    backward, or a weight gradient that split-backward schedules may defer."""

    FORWARD = "forward"
    INPUT_GRAD = "input_grad"
    WEIGHT_GRAD = "weight_grad"


class GemmLayout(StrEnum):
    """Operand layout of a GEMM, as ``nn.Linear`` and its autograd run it (the key of measured GEMM grids):
    ``Y = X·Wᵀ`` forward, ``dX = dY·W`` data gradient, ``dW = dYᵀ·X`` weight gradient (also the attention core's
    gradient of K and V, which has the weight-gradient layout without being a weight gradient)."""

    FWD = "fwd"
    DGRAD = "dgrad"
    WGRAD = "wgrad"


class Overlap(StrEnum):
    """How a collective may overlap compute.

    ``NONE``: it blocks the compute stream at the op it serves (before an operand delivery, after a reduction);
    ``COMPUTE``: the framework always runs it under the compute op ``behind``; ``TP_COMM_OVERLAP``: under ``behind``
    only with ``--tp-comm-overlap`` (Transformer Engine userbuffers), else it blocks there; ``DP_WINDOW``: a
    data-parallel bucket collective, overlapped with the backward (gradients) or the forward (parameters) of its
    stage by the data-parallel model (:mod:`trainsim.estimate`, the engine's data-parallel stream); ``P2P``: a
    pipeline transfer between stages (its overlap is the schedule's).
    """

    NONE = "none"
    COMPUTE = "compute"
    TP_COMM_OVERLAP = "tp_comm_overlap"
    DP_WINDOW = "dp_window"
    P2P = "p2p"


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
    role: Role | None = None  # None: from the phase (forward, or input gradient for backward ops)
    grad_of: str = ""  # backward GEMMs: the forward op they differentiate
    layout: GemmLayout | None = None  # GEMMs: operand layout (None: from the role); other kinds: None
    efficiency: float = 1.0  # throughput relative to the plain kernel of this shape (masked attention: < 1)
    host_calls: int = 1  # times the framework's Python issues this op (a loop over local experts: one per expert)
    kernels: int = 1  # kernels the op launches (a C++ loop over local experts: one per expert)
    kernel: str = ""  # attention: the flash kernel library (Framework.flash_kernel; "" = the modelled one)
    host_sync: bool = False  # the host waits here for everything the device has queued (trainsim.cost.host)

    def __post_init__(self) -> None:
        if self.role is None:
            object.__setattr__(self, "role", Role.FORWARD if self.phase == "fwd" else Role.INPUT_GRAD)
        if self.kind == "gemm" and self.layout is None:
            layout = (GemmLayout.FWD if self.role is Role.FORWARD
                      else GemmLayout.WGRAD if self.role is Role.WEIGHT_GRAD else GemmLayout.DGRAD)
            object.__setattr__(self, "layout", layout)

    @property
    def is_weight_grad(self) -> bool:
        """A weight gradient (movable to a ``W`` action by split-backward schedules)."""
        return self.role is Role.WEIGHT_GRAD

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
    send buffer; send/recv: the message).

    ``overlap`` says how it may overlap compute and ``behind`` is the compute op it runs under (or, when it cannot
    hide, the op it serves: it blocks right before it for an operand delivery, right after for a reduction).
    ``network_share``: the share of an all-to-all's inter-node bytes actually sent over the network (a
    deduplicating MoE dispatcher, :func:`trainsim.workload.routing.network_copy_ratio`; 1 for NCCL's).
    ``anchor``/``before``: where a collective without such an op in its pass blocks the compute stream (e.g. a
    row-parallel all-reduce right before the residual add). Ops are referenced, never named.
    """

    name: str
    collective: Collective
    group: Group
    phase: Phase
    nbytes: float
    overlap: Overlap = Overlap.NONE
    behind: ComputeOp | None = None
    anchor: ComputeOp | None = None
    before: bool = False
    network_share: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.group, Group):  # a name: checked, never priced as another group
            object.__setattr__(self, "group", Group.parse(self.group))
        if self.overlap in (Overlap.COMPUTE, Overlap.TP_COMM_OVERLAP) and self.behind is None:
            raise ValueError(f"collective {self.name}: overlap {self.overlap} needs the compute op it hides behind")


def gemm(name: str, phase: Phase, m: int, n: int, k: int, dtype: str, batch: int = 1,
         out_bytes: float = 2.0, role: Role | None = None, grad_of: str = "",
         layout: GemmLayout | None = None) -> ComputeOp:
    """A (batched) GEMM ``C[m,n] = A[m,k] · B[k,n]``: 2·m·n·k FLOPs; reads A and B, writes C."""
    size = DTYPE_BYTES[dtype]
    nbytes = batch * ((m * k + k * n) * size + m * n * out_bytes)
    return ComputeOp(name, "gemm", phase, 2.0 * batch * m * n * k, nbytes, dtype, batch, m, n, k, role=role,
                     grad_of=grad_of, layout=layout)


def gemm_with_grads(name: str, m: int, n: int, k: int, dtype: str,
                    batch: int = 1) -> tuple[ComputeOp, ComputeOp, ComputeOp]:
    """Forward ``Y[m,n] = X[m,k]·W[k,n]`` and its two backward GEMMs (data and weight gradients)."""
    return (
        gemm(name, "fwd", m, n, k, dtype, batch),
        gemm(f"{name}_dgrad", "bwd", m, k, n, dtype, batch, role=Role.INPUT_GRAD, grad_of=name),
        gemm(f"{name}_wgrad", "bwd", k, n, m, dtype, batch, out_bytes=4.0, role=Role.WEIGHT_GRAD, grad_of=name),
    )


class OpSet(Container[ComputeOp]):
    """The compute ops of one pass, by identity: collectives reference the very op objects of their block (cheap to
    build and test, no hashing of op fields)."""

    __slots__ = ("_ids",)

    def __init__(self, ops: Iterable[ComputeOp]) -> None:
        self._ids = {id(op) for op in ops}

    def __contains__(self, op: object) -> bool:
        return id(op) in self._ids


def overlap_target(op: CommOp, in_pass: Container[ComputeOp],
                   tp_comm_overlap: bool) -> tuple[ComputeOp | None, bool]:
    """The compute op collective ``op`` runs under in this pass, and whether it may hide behind it.

    One rule for both engines: ``op.behind`` if it runs in this pass (a weight gradient that a split-backward
    schedule moved to its ``W`` action does not); hiding needs :attr:`Overlap.COMPUTE`, or
    :attr:`Overlap.TP_COMM_OVERLAP` with ``--tp-comm-overlap``. The analytic costs then take :func:`exposed_time`;
    the event engine runs the same overlap on its streams.
    """
    target = op.behind if op.behind is not None and op.behind in in_pass else None
    can_hide = target is not None and (op.overlap is Overlap.COMPUTE
                                       or (op.overlap is Overlap.TP_COMM_OVERLAP and tp_comm_overlap))
    return target, can_hide


def exposed_time(comm_s: float, hidden_by_s: float, can_hide: bool, slowdown: float) -> tuple[float, float]:
    """(exposed seconds, compute slowdown seconds) of a collective of ``comm_s`` under ``hidden_by_s`` of compute:
    what outlasts the compute is exposed; the compute under it runs slower by the overlap factor."""
    if can_hide and hidden_by_s > 0:
        return max(0.0, comm_s - hidden_by_s), slowdown * min(comm_s, hidden_by_s)
    return comm_s, 0.0


def elementwise(name: str, phase: Phase, nbytes: float, flops: float = 0.0, dtype: str = "bf16",
                grad_of: str = "") -> ComputeOp:
    """A memory-bound kernel moving ``nbytes`` through HBM, on tensors of ``dtype`` (``grad_of``: the forward op
    whose backward it belongs to, when its name does not say so)."""
    return ComputeOp(name, "elementwise", phase, flops, nbytes, dtype, grad_of=grad_of)


def attention(name: str, phase: Phase, batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int,
              causal: bool, dtype: str = "bf16", efficiency: float = 1.0, kernel: str = "") -> ComputeOp:
    """Fused (Flash) attention. Forward: QKᵀ and PV, 4·b·a·s_q·s_kv·d FLOPs, halved by a causal mask.
    Backward: five matrix products (S recomputed), 2.5× the forward. ``efficiency``: the kernel variant's
    throughput relative to the plain kernel of this shape (an explicit mask tensor: see
    :func:`trainsim.workload.fusion.masked_attention_efficiency`); ``kernel``: the stack's flash kernel library,
    priced by :func:`trainsim.cost.attention_kernels.flash_kernel_factor`)."""
    fwd = 4.0 * batch * heads * seq_q * seq_kv * head_dim * (0.5 if causal else 1.0)
    flops = fwd if phase == "fwd" else 2.5 * fwd
    size = DTYPE_BYTES[dtype]
    io = batch * heads * head_dim * (seq_q * 2 + seq_kv * 2) * size  # Q, O (+K, V) once; dO, dQ... similar
    nbytes = io if phase == "fwd" else 2.5 * io
    return ComputeOp(name, "attention", phase, flops, nbytes, dtype,
                     attn=(batch, heads, seq_q, seq_kv, head_dim, causal), efficiency=efficiency, kernel=kernel)
