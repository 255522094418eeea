"""Timed templates of the work inside one pipeline action: layers, embedding, head, and whole model chunks.

The event engine schedules one task per (stage, micro-batch, model chunk, F/B/W). What happens *inside* such a task
is the same for every micro-batch of a stage, so it is simulated once here, at operator granularity, on two streams:

* the **compute stream** runs the compute ops of :mod:`trainsim.workload.layers` in order (backward ops in true
  backward order: modules reversed, data gradient before weight gradient; the recompute forward of a layer right
  before its backward);
* the **comm stream** runs the layer's TP/SP and CP collectives (FIFO), and the **ep stream** the MoE token
  dispatch/combine all-to-alls and the expert-TP gathers (Megatron-Core and DeepEP issue them on their own
  stream). A collective the framework overlaps (:class:`~trainsim.workload.ops.Overlap` ``COMPUTE``, or
  ``TP_COMM_OVERLAP`` under ``--tp-comm-overlap``) starts with the compute op it hides behind and the next op
  waits for it; while it runs, compute progresses ``1 + overlap_slowdown`` times slower (Proteus' overlap factor,
  applied as a rate: the fluid version of the analytic ``overlap_slowdown · min(t, x)``). Other collectives block
  the compute stream right before (all-gathers, broadcasts) or after (reductions) the op they serve, or at their
  ``anchor`` op.

With ZeRO-3 the per-layer parameter all-gathers (prefetched one layer ahead) and gradient reduce-scatters run on the
data-parallel stream of the chunk and are simulated the same way.

Everything is priced by the job's :class:`~trainsim.cost.job_costs.CostModel` (analytic or measured), the same layer
that feeds the analytic estimator.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainsim.cost.comm import Placement
from trainsim.cost.host import host_excess
from trainsim.cost.job_costs import zero3_layer_comm
from trainsim.cost.sharded import Zero3Comm, progress, run_pass
from trainsim.parallel.axes import Group
from trainsim.workload.layers import Shard, Work, embedding_work, head_work, layer_work
from trainsim.workload.ops import CommOp, ComputeOp, Role, comm_stream, overlap_target

if TYPE_CHECKING:
    from trainsim.cost.job_costs import CostModel
    from trainsim.spec.job import Job

#: Compute ops whose cost grows with the square of the sequence length (the attention core).
QUADRATIC_OPS = frozenset({"flash_attn", "attn_qk", "attn_av", "softmax", "attn_dropout"})

COMPUTE, COMM, DP, EP = "compute", "comm", "dp", "ep"  # stream names
#: collectives that deliver an operand (issued right before the op they serve, stalling it); the others reduce a
#: result (issued right after)
PREFETCH = frozenset({"all_gather", "broadcast"})


@dataclass(frozen=True)
class Slice:
    """One op inside a template, relative to the template's start (seconds)."""

    stream: str  # compute | comm | ep | dp
    name: str
    start: float
    end: float
    group: Group | None = None  # the collective's group (None for compute)
    nbytes: float = 0.0


@dataclass(frozen=True)
class BlockTime:
    """A simulated block: its duration and where the time went.

    ``exposed[g]`` is the time the compute stream stalls for collectives of group ``g``; ``compute`` is the
    compute-stream busy time (``slowdown`` of it caused by overlapping communication); ``duration = compute +
    sum(exposed)``. ``internode`` is the collective time on groups that leave the node (for link sharing and slow
    links), ``internode_exposed`` its stalling part.
    """

    duration: float = 0.0
    compute: float = 0.0
    slowdown: float = 0.0
    quadratic: float = 0.0
    exposed: Mapping[Group, float] = field(default_factory=dict)
    comm: Mapping[Group, float] = field(default_factory=dict)
    internode: float = 0.0
    internode_exposed: float = 0.0
    nbytes: float = 0.0
    slices: tuple[Slice, ...] = ()

    def then(self, other: BlockTime) -> BlockTime:
        """``self`` followed by ``other`` (slices of ``other`` shifted)."""
        shift = self.duration
        return BlockTime(
            self.duration + other.duration, self.compute + other.compute, self.slowdown + other.slowdown,
            self.quadratic + other.quadratic, _add(self.exposed, other.exposed), _add(self.comm, other.comm),
            self.internode + other.internode, self.internode_exposed + other.internode_exposed,
            self.nbytes + other.nbytes,
            self.slices + tuple(dataclasses.replace(s, start=s.start + shift, end=s.end + shift)
                                for s in other.slices),
        )


def _add(a: Mapping[Group, float], b: Mapping[Group, float], k: float = 1.0) -> dict[Group, float]:
    out = dict(a)
    for g, t in b.items():
        out[g] = out.get(g, 0.0) + k * t
    return out


def _root(op: ComputeOp) -> str:
    """The forward op a backward op belongs to (its ``grad_of``, else the ``_grad`` naming convention)."""
    if op.grad_of:
        return op.grad_of
    return op.name[:-5] if op.name.endswith("_grad") else op.name


def backward_order(fwd: Iterable[ComputeOp], bwd: Iterable[ComputeOp]) -> list[ComputeOp]:
    """Backward ops in execution order: reverse forward order of their module, data gradient before weight gradient.

    Ops whose forward counterpart is unknown keep their relative order at the end.
    """
    position: dict[str, int] = {}
    for i, op in enumerate(fwd):
        position.setdefault(op.name, i)
    ops = list(bwd)

    def key(item: tuple[int, ComputeOp]) -> tuple[int, int, int]:
        i, op = item
        pos = position.get(_root(op), -1)
        return (-pos if pos >= 0 else 1, 1 if op.is_weight_grad else 0, i)

    return [op for _, op in sorted(enumerate(ops), key=key)]


@dataclass(frozen=True)
class _Comm:
    op: CommOp
    time: float
    anchor: int  # compute op index, or len(ops) - 1 for the end of the block
    mode: str  # before | with | after
    internode: bool


def simulate_ops(compute: list[ComputeOp], comm: Iterable[CommOp], model: CostModel,
                 places: Mapping[Group, Placement], tp_comm_overlap: bool,
                 moved: Collection[ComputeOp] = ()) -> BlockTime:
    """Simulate compute ops and their collectives on the compute and comm streams (see module docstring).

    Which collective hides behind which op follows :func:`~trainsim.workload.ops.overlap_target` (the rule the
    analytic costs use). A collective that cannot hide blocks at the op it serves (``behind``: before an operand
    delivery, after a reduction), else at its ``anchor``, else — when its op is a weight gradient in ``moved`` (this
    pass's weight gradients that a split-backward schedule runs later) — right after the same GEMM's input
    gradient, else at the end of the block. The wait for a host slower than the GPU
    (:func:`trainsim.cost.host.host_excess`) is a ``host`` slice at the end of the pass."""
    slow = model.calibration.overlap_slowdown
    index = {op: i for i, op in reversed(list(enumerate(compute)))}  # the first position of every op
    input_grad_of = {op.grad_of: i for i, op in reversed(list(enumerate(compute)))
                     if op.grad_of and op.role is Role.INPUT_GRAD}
    comms: list[_Comm] = []
    for op in comm:
        place = places[op.group]
        t = model.collective(op, place)
        if t <= 0.0:
            continue
        target, can_hide = overlap_target(op, index, tp_comm_overlap)
        gone = op.behind if op.behind is not None and op.behind in moved else None  # moved to the W action
        if target is not None and can_hide:
            anchor, mode = index[target], "with"
        elif target is not None:
            anchor, mode = index[target], "before" if op.collective in PREFETCH else "after"
        elif op.anchor is not None and op.anchor in index:
            anchor, mode = index[op.anchor], "before" if op.before else "after"
        elif gone is not None and gone.grad_of in input_grad_of:  # right after the same GEMM's input gradient
            anchor, mode = input_grad_of[gone.grad_of], "after"
        else:
            anchor, mode = max(len(compute) - 1, 0), "after"
        comms.append(_Comm(op, t, anchor, mode, place.crosses_nodes))
    by_anchor: dict[tuple[int, str], list[_Comm]] = {}
    for c in comms:
        by_anchor.setdefault((c.anchor, c.mode), []).append(c)

    t = 0.0
    free = {COMM: 0.0, EP: 0.0}  # TP/CP collectives and the MoE dispatch/combine run on separate streams
    busy: list[tuple[float, float]] = []
    slices: list[Slice] = []
    exposed: dict[Group, float] = {}
    comm_total: dict[Group, float] = {}
    compute_busy = slowdown = quadratic = internode = internode_exposed = nbytes = 0.0

    def issue(c: _Comm, at: float) -> tuple[float, float]:
        nonlocal internode, nbytes
        stream = EP if comm_stream(c.op.group) == EP else COMM
        cs = max(at, free[stream])
        ce = cs + c.time
        free[stream] = ce
        busy.append((cs, ce))
        busy.sort()
        slices.append(Slice(stream, c.op.name, cs, ce, c.op.group, c.op.nbytes))
        comm_total[c.op.group] = comm_total.get(c.op.group, 0.0) + c.time
        nbytes += c.op.nbytes
        if c.internode:
            internode += c.time
        return cs, ce

    def stall(c: _Comm, until: float) -> None:
        nonlocal t, internode_exposed
        if until > t:
            exposed[c.op.group] = exposed.get(c.op.group, 0.0) + until - t
            if c.internode:
                internode_exposed += until - t
            t = until

    gpu: list[float] = []  # each op's price, for the host wait of the pass
    for i, op in enumerate(compute):
        for c in by_anchor.get((i, "before"), ()):
            _, ce = issue(c, t)
            stall(c, ce)
        waits: list[tuple[float, _Comm]] = []
        for c in by_anchor.get((i, "with"), ()):
            _, ce = issue(c, t)
            waits.append((ce, c))
        w = model.compute(op)
        gpu.append(w)
        end = progress(t, w, busy, slow) if busy else t + w
        slices.append(Slice(COMPUTE, op.name, t, end))
        compute_busy += end - t
        slowdown += (end - t) - w
        if _root(op) in QUADRATIC_OPS or op.kind == "attention":
            quadratic += w
        t = end
        for ce, c in sorted(waits, key=lambda x: x[0]):
            stall(c, ce)
        for c in by_anchor.get((i, "after"), ()):
            _, ce = issue(c, t)
            stall(c, ce)
    if not compute:
        for c in comms:
            _, ce = issue(c, t)
            stall(c, ce)
    wait = host_excess(compute, gpu, model.host, other_gpu=t - sum(gpu))  # the host runs on through the stalls
    if wait > 0.0:
        slices.append(Slice(COMPUTE, "host", t, t + wait))
        compute_busy += wait
        t += wait
    return BlockTime(t, compute_busy, slowdown, quadratic, exposed, comm_total, internode, internode_exposed,
                     nbytes, tuple(slices))


@dataclass(frozen=True)
class Segment:
    """``count`` consecutive copies of ``block`` (a layer, the embedding or the head), labelled for traces."""

    label: str
    block: BlockTime
    count: int = 1


@dataclass(frozen=True)
class ChunkTemplate:
    """The work of one action (F, B or W of one micro-batch on one model chunk of one stage).

    Aggregates are for the whole chunk; ``segments`` lay the blocks out in order (for layer-detail traces) and
    ``dp_slices`` hold ZeRO-3's per-layer collectives on the data-parallel stream.
    """

    kind: str
    segments: tuple[Segment, ...]
    total: BlockTime  # aggregates (no slices)
    dp_slices: tuple[Slice, ...] = ()
    layer_offsets: tuple[float, ...] = ()  # start of each block copy within the chunk (length = sum of counts)

    @property
    def duration(self) -> float:
        """Seconds of the whole action at nominal sequence length on a nominal GPU."""
        return self.total.duration

    def exposed(self, group: Group) -> float:
        """Compute-stream stall on collectives of ``group``."""
        return self.total.exposed.get(group, 0.0)


def _repeat_total(segments: Iterable[Segment]) -> BlockTime:
    dur = comp = slowd = quad = inter = inter_e = nb = 0.0
    exposed: dict[Group, float] = {}
    comm: dict[Group, float] = {}
    for seg in segments:
        b, n = seg.block, seg.count
        dur += n * b.duration
        comp += n * b.compute
        slowd += n * b.slowdown
        quad += n * b.quadratic
        inter += n * b.internode
        inter_e += n * b.internode_exposed
        nb += n * b.nbytes
        exposed = _add(exposed, b.exposed, n)
        comm = _add(comm, b.comm, n)
    return BlockTime(dur, comp, slowd, quad, exposed, comm, inter, inter_e, nb)


def _offsets(segments: Iterable[Segment]) -> tuple[float, ...]:
    out: list[float] = []
    t = 0.0
    for seg in segments:
        for _ in range(seg.count):
            out.append(t)
            t += seg.block.duration
    return tuple(out)


class BlockLibrary:
    """Builds and caches the timed templates of a job."""

    def __init__(self, job: Job, model: CostModel, places: Mapping[Group, Placement], shard: Shard) -> None:
        self.job = job
        self.model = model
        self.places = places
        self.shard = shard
        self.tp_comm_overlap = bool(job.training.tp_comm_overlap)  # resolved by the Job
        self._blocks: dict[tuple[object, ...], BlockTime] = {}
        self._chunks: dict[tuple[object, ...], ChunkTemplate] = {}

    # ---- blocks ---------------------------------------------------------------------------------------------------
    def _simulate(self, ops: list[ComputeOp], comm: Iterable[CommOp],
                  moved: Collection[ComputeOp] = ()) -> BlockTime:
        return simulate_ops(ops, comm, self.model, self.places, self.tp_comm_overlap, moved)

    def _work_block(self, work: Work, kind: str, split: bool) -> BlockTime:
        if kind == "F":
            return self._simulate(list(work.fwd), work.comm_fwd)
        bwd = backward_order(work.fwd, work.bwd)
        if kind == "W":
            return self._simulate([op for op in bwd if op.is_weight_grad], ())
        moved: frozenset[ComputeOp] = frozenset()
        if split:
            moved = frozenset(op for op in bwd if op.is_weight_grad)
            bwd = [op for op in bwd if not op.is_weight_grad]
        re = self._simulate(list(work.recompute), work.comm_recompute) if work.recompute else BlockTime()
        return re.then(self._simulate(bwd, work.comm_bwd, moved))

    def layer(self, kind: str, moe: bool, recompute: str, split: bool = False) -> BlockTime:
        """One transformer layer: ``kind`` F, B (recompute included) or W; ``split``: B without weight gradients."""
        key = ("layer", kind, moe, recompute, split)
        if key not in self._blocks:
            shard = dataclasses.replace(self.shard, recompute=recompute)
            self._blocks[key] = self._work_block(layer_work(self.job.model, shard, moe), kind, split)
        return self._blocks[key]

    def embedding(self, kind: str, split: bool = False) -> BlockTime:
        """Input embedding of the first virtual stage."""
        key = ("embedding", kind, split)
        if key not in self._blocks:
            self._blocks[key] = self._work_block(embedding_work(self.job.model, self.shard), kind, split)
        return self._blocks[key]

    def head(self, kind: str, split: bool = False) -> BlockTime:
        """Final norm, LM head and loss of the last virtual stage."""
        key = ("head", kind, split)
        if key not in self._blocks:
            self._blocks[key] = self._work_block(head_work(self.job.model, self.shard), kind, split)
        return self._blocks[key]

    # ---- chunks ---------------------------------------------------------------------------------------------------
    def chunk(self, kind: str, layers: tuple[tuple[bool, str], ...], first: bool, last: bool, split: bool,
              zero3: Zero3Comm | None = None) -> ChunkTemplate:
        """Template of one action over a model chunk.

        ``layers``: (is MoE, recompute mode) of each layer in forward order; ``first``/``last``: the chunk holds the
        embedding / the head; ``zero3``: one layer's parameter all-gather and gradient reduce-scatter on the
        data-parallel stream, with the prefetch depth (per-micro-batch ZeRO-3 / FSDP), or ``None``.
        """
        key = (kind, layers, first, last, split, zero3)
        if key in self._chunks:
            return self._chunks[key]
        runs: list[Segment] = []
        for (moe, rc) in layers:
            block = self.layer(kind, moe, rc, split)
            label = "moe layer" if moe else "layer"
            if runs and runs[-1].block is block:
                runs[-1] = Segment(label, block, runs[-1].count + 1)
            else:
                runs.append(Segment(label, block))
        segments: list[Segment] = []
        if kind == "F":
            if first:
                segments.append(Segment("embedding", self.embedding(kind, split)))
            segments += runs
            if last:
                segments.append(Segment("head", self.head(kind, split)))
        else:
            if last:
                segments.append(Segment("head", self.head(kind, split)))
            segments += [Segment(s.label, s.block, s.count) for s in reversed(runs)]
            if first:
                segments.append(Segment("embedding", self.embedding(kind, split)))
        segments = [s for s in segments if s.block.duration > 0 or s.block.slices]
        if zero3 is not None and kind != "W" and sum(s.count for s in segments):
            tmpl = self._zero3_chunk(kind, tuple(segments), zero3)
        else:
            tmpl = ChunkTemplate(kind, tuple(segments), _repeat_total(segments), (), _offsets(segments))
        self._chunks[key] = tmpl
        return tmpl

    def _zero3_chunk(self, kind: str, segments: tuple[Segment, ...], zero3: Zero3Comm) -> ChunkTemplate:
        """Chunk with the ZeRO-3 / FSDP gathers and reduce-scatters of :func:`trainsim.cost.sharded.run_pass` (the
        schedule the analytic estimate uses too); the embedding and the head are not gathered on their own."""
        crosses = self.places[Group.DP_CP].crosses_nodes
        blocks = [(seg.block.duration, seg.label != "embedding" and seg.label != "head")
                  for seg in segments for _ in range(seg.count)]
        trace = run_pass(kind, blocks, zero3, self.model.calibration.overlap_slowdown)
        dp_slices = [Slice(DP, name, start, end, Group.DP) for name, start, end in trace.slices]
        base = _repeat_total(segments)
        stall, comm_dp, slowdown = trace.stall, trace.comm, trace.slowdown
        total = BlockTime(
            trace.end, base.compute + slowdown, base.slowdown + slowdown, base.quadratic,
            _add(base.exposed, {Group.DP: stall}), _add(base.comm, {Group.DP: comm_dp}),
            base.internode + (comm_dp if crosses else 0.0), base.internode_exposed + (stall if crosses else 0.0),
            base.nbytes,
        )
        # the blocks keep their own internal layout; only their starts move
        return ChunkTemplate(kind, segments, total, tuple(dp_slices), tuple(trace.offsets))


def zero3_costs(job: Job, model: CostModel, places: Mapping[Group, Placement], stage_params: float,
                layers: int) -> Zero3Comm | None:
    """Per-layer ZeRO-3 traffic as :func:`trainsim.cost.job_costs.zero3_layer_comm` prices it, or ``None``."""
    return zero3_layer_comm(job, model, places[Group.DP_CP], stage_params, layers)


def ceil_div(a: float, b: float) -> int:
    """``⌈a / b⌉`` for positive numbers."""
    return max(1, math.ceil(a / b))
