"""The schedule of ZeRO-3 / FSDP collectives inside one micro-batch's forward or backward pass.

One owner for both engines: the analytic estimate (:func:`trainsim.cost.job_costs.zero3_overhead`) and the event
engine's chunk templates (:mod:`trainsim.graph.blocks`) both call :func:`run_pass`, so they expose exactly the same
data-parallel time for the same blocks.

A pass is a sequence of blocks (layers, and the embedding and head, which are not gathered on their own). A layer is
split into its *gather units* (:attr:`Zero3Comm.units`): one unit per layer for FSDP (the wrapped block's
FlatParameter, FSDP2's ``fully_shard`` module), one per sub-module for DeepSpeed ZeRO-3 (``fetch_sub_module``).
Compute runs unit after unit on the compute stream; every all-gather and reduce-scatter queues on one data-parallel
stream ("for NCCL backend, any collectives, even if issued in different streams, contend for the same per-device
NCCL stream": ``torch.distributed.fsdp.BackwardPrefetch``). A unit starts when its parameters are gathered, and while
the stream is busy the compute runs ``1 + overlap_slowdown`` times slower (Proteus' overlap factor: the NCCL kernels
take SMs and memory bandwidth).

When gathers are issued — the *prefetch rule*:

* **by units** (FSDP): when a unit starts, the gathers of the next ``depth`` units are issued (FSDP1's
  ``limit_all_gathers`` rate limiter keeps at most two all-gathered units in flight, so the implicit or explicit
  forward prefetch runs one unit ahead; without it the CPU issues every gather ahead). In backward FSDP1's
  ``backward_prefetch`` orders the next all-gather relative to the current unit's gradient computation and
  reduce-scatter: ``pre`` issues it before the computation, ``post`` after it but before the reduce-scatter (the
  next unit waits for its gather), ``none`` when the next unit's hook runs (after the reduce-scatter).
* **by elements** (DeepSpeed, ``PartitionedParameterCoordinator.fetch_sub_module``): a sub-module fetches its own
  parameters if they are not in flight, then prefetches the next parameters of the trace as *one* coalesced
  all-gather, adding them while the batch holds fewer than ``min(stage3_max_live_parameters − live,
  stage3_prefetch_bucket_size)`` elements (the parameter that crosses the limit is included). With layers bigger
  than the bucket, the prefetch reaches less than a layer ahead.

2021 DeepSpeed (:attr:`Zero3Comm.device_sync`, :attr:`Zero3Comm.host_per_collective`): the host synchronizes the
device before every all-gather, so a gather starts when the compute and the stream have drained and the compute
the host launches next waits for it to be issued (only the last prefetched gather overlaps a unit's compute); list
collectives cost the host one copy dispatch per rank (after a gather's collective, before a reduce-scatter's), which
delays the compute it launches next; a full gradient bucket is reduce-scattered tensor by tensor
(:attr:`Zero3Comm.reduce_per_unit`). With full recompute a unit that DeepSpeed's reuse distance releases after its
recompute forward is gathered twice in the backward pass (:attr:`Unit.regather`).

Copies: FSDP2 copies the all-gather output into the unsharded parameters (``foreach_all_gather_copy_out``) and the
gradients into the reduce-scatter input (``foreach_reduce_scatter_copy_in``) on the compute stream: both delay the
compute (:attr:`Zero3Comm.copy_out_time`, :attr:`Zero3Comm.grad_copy_time`). Copies on a side stream before the
reduce-scatter (FSDP1's cast to the reduce dtype, DeepSpeed's contiguous gradient bucket) are part of
:attr:`Zero3Comm.reduce_time`.

Gradients are reduce-scattered per unit after its backward (FSDP) or, with ``reduce_bucket_params`` (DeepSpeed's
``reduce_bucket_size``), bucket by bucket: a bucket is reduce-scattered when the next gradient would overflow it,
and the last one when the pass ends — exposed after the backward.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

BackwardOrder = Literal["pre", "post", "none"]


def progress(t0: float, work: float, busy: Sequence[tuple[float, float]], slow: float,
             ends: Sequence[float] | None = None) -> float:
    """End of ``work`` seconds of compute started at ``t0``, slowed by ``1 + slow`` inside the ``busy`` intervals
    (sorted, disjoint). ``ends``: the intervals' ends, to skip those before ``t0`` by bisection."""
    pos, remaining = t0, work
    start = bisect.bisect_right(ends, pos) if ends is not None else 0
    for i in range(start, len(busy)):
        a, b = busy[i]
        if b <= pos:
            continue
        if a > pos:
            free = a - pos
            if remaining <= free:
                return pos + remaining
            remaining -= free
            pos = a
        capacity = (b - pos) / (1.0 + slow)
        if remaining <= capacity:
            return pos + remaining * (1.0 + slow)
        remaining -= capacity
        pos = b
    return pos + remaining


@dataclass(frozen=True, slots=True)
class Unit:
    """One gather unit of a layer: its share of the layer's parameters and compute."""

    params: float  # elements all-gathered for it (0: nothing to gather — persistent parameters)
    grads: float  # gradient elements it reduces (persistent parameters included)
    share: float  # fraction of the layer's compute
    regather: bool = False  # full recompute: released after its recompute forward, gathered again for backward


@dataclass(frozen=True)
class Zero3Comm:
    """Per-micro-batch ZeRO-3 / FSDP collectives of one stage (per-micro-batch gathering only) and the rules that
    issue them (see the module docstring)."""

    units: tuple[Unit, ...]  # one layer's gather units, forward order
    gather_time: Callable[[float], float]  # s to all-gather n elements as one (coalesced) collective
    reduce_time: Callable[[float], float]  # s to reduce-scatter n gradient elements (copy-in included)
    copy_out_time: Callable[[float], float] = field(default=lambda n: 0.0)  # s on the compute stream per gather
    grad_copy_time: Callable[[float], float] = field(default=lambda n: 0.0)  # s on the compute stream per reduce
    forward_depth: int = 1  # units gathered ahead in forward (prefetch by units)
    backward_order: BackwardOrder = "pre"
    backward_depth: int = 1
    prefetch_params: float | None = None  # prefetch by elements (DeepSpeed); None: by units
    max_live_params: float = math.inf
    reduce_bucket_params: float | None = None  # None: one reduce-scatter per unit after its backward
    gather_in_backward: bool = True  # resharded after forward: gathered again for the backward pass
    device_sync: bool = False  # the host drains the device before every all-gather (DeepSpeed <= 0.5)
    host_per_collective: float = 0.0  # s the host spends issuing one collective (per-rank copies of list APIs)
    reduce_per_unit: bool = False  # a full bucket is reduce-scattered unit by unit (one collective per tensor)

    @property
    def gather(self) -> float:
        """s, one layer's all-gathers issued unit by unit (without prefetch batching)."""
        return sum(self.gather_time(u.params) for u in self.units if u.params > 0)

    @property
    def reduce(self) -> float:
        """s, one layer's reduce-scatters (one per unit, or the layer's share of the buckets)."""
        if self.reduce_bucket_params is None or self.reduce_per_unit:
            return sum(self.reduce_time(u.grads) for u in self.units if u.grads > 0)
        grads = sum(u.grads for u in self.units)
        bucket = min(self.reduce_bucket_params, grads)
        return grads / bucket * self.reduce_time(bucket) if bucket > 0 else 0.0


@dataclass
class PassTrace:
    """What :func:`run_pass` computed for one pass over the blocks."""

    end: float  # s, the pass's duration (compute, stalls and the slowdown, until the stream drains)
    offsets: list[float]  # start of every block
    stall: float  # s the compute waited for gathers, plus the stream's tail after the last block
    slowdown: float  # s added to compute by the overlap slowdown
    comm: float  # s of collectives issued
    slices: list[tuple[str, float, float]]  # (name, start, end) of every collective on the stream


@dataclass
class _Stream:
    free: float = 0.0
    comm: float = 0.0
    busy: list[tuple[float, float]] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    slices: list[tuple[str, float, float]] = field(default_factory=list)

    def issue(self, name: str, dur: float, at: float) -> float:
        start = max(at, self.free)
        self.free = start + dur
        if dur > 0:
            self.busy.append((start, self.free))
            self.ends.append(self.free)
            self.slices.append((name, start, self.free))
            self.comm += dur
        return self.free


def run_pass(kind: str, blocks: Sequence[tuple[float, bool]], c: Zero3Comm, slow: float) -> PassTrace:
    """Schedule one forward (``kind == "F"``) or backward pass over ``blocks`` — ``(seconds, is_layer)`` in
    execution order — under the ZeRO-3 traffic ``c``, with compute ``slow`` slower while the stream is busy."""
    fwd = kind == "F"
    gathers = fwd or c.gather_in_backward
    # sub-items: (duration, gather index or -1, grads, block index)
    items: list[tuple[float, int, float, int]] = []
    params: list[float] = []
    units = c.units if fwd else tuple(reversed(c.units))
    for bi, (dur, is_layer) in enumerate(blocks):
        if not is_layer:
            items.append((dur, -1, 0.0, bi))
            continue
        for u in units:
            g = -1
            if gathers and u.params > 0:
                if not fwd and u.regather:  # the recompute forward's gather, released before the backward
                    items.append((0.0, len(params), 0.0, bi))
                    params.append(u.params)
                g = len(params)
                params.append(u.params)
            items.append((dur * u.share, g, u.grads, bi))
    n_g = len(params)
    ready = [math.inf] * n_g
    issued = 0  # gathers issued so far (always a prefix, in trace order)
    stream = _Stream()
    by_elements = c.prefetch_params is not None
    depth = c.forward_depth if fwd else c.backward_depth
    order: BackwardOrder = "pre" if fwd else c.backward_order
    host = c.host_per_collective
    t = stall = slowdown = 0.0

    def launch(name: str, dur: float, at: float, gather: bool) -> float:
        """Issue one collective from the host at ``at``; returns its end on the stream. With ``device_sync`` a
        gather first waits for the device to drain (compute so far and the stream); the host's time issuing it
        (``host``: copies of list APIs, enqueued behind a gather, ahead of a reduce-scatter) delays the compute
        the host launches next."""
        nonlocal t, stall
        if c.device_sync and gather:
            at = max(at, t, stream.free)
        if gather:  # the collective, then the copies out as the host enqueues them
            start = max(at, stream.free)
            end = stream.issue(name, max(start + dur, at + host) - start, start)
        else:  # the copies in as the host enqueues them, then the collective
            end = stream.issue(name, dur, max(at + host, stream.free))
        if at + host > t:  # the host returns after ``at`` (synchronised) plus its copies
            stall += at + host - t
            t = at + host
        return end

    if not by_elements and order == "pre" and n_g and depth >= 1:
        ready[0] = launch("zero3_param_gather", c.gather_time(params[0]), 0.0, True)
        issued = 1

    live = sum(params[:issued])  # elements gathered or in flight and not yet released

    def issue_upto(last: int, at: float) -> None:
        nonlocal issued, live
        while issued < n_g and issued <= last:
            ready[issued] = launch("zero3_param_gather", c.gather_time(params[issued]), at, True)
            live += params[issued]
            issued += 1

    def prefetch_batch(at: float) -> None:
        """DeepSpeed: one coalesced all-gather of the next parameters of the trace."""
        nonlocal issued, live
        budget = min(c.max_live_params - live, c.prefetch_params or 0.0)
        first, numel = issued, 0.0
        while issued < n_g and numel < budget:
            numel += params[issued]
            issued += 1
        live += numel
        if numel <= 0:
            return
        if c.device_sync:  # every parameter its own gather, each after the device drained
            for i in range(first, issued):
                ready[i] = launch("zero3_param_gather", c.gather_time(params[i]), at, True)
            return
        end = launch("zero3_param_gather", c.gather_time(numel), at, True)
        for i in range(first, issued):
            ready[i] = end

    bucket: list[float] = []  # gradients waiting in the reduce bucket, and their sum
    held = 0.0

    def flush(at: float) -> None:
        nonlocal held
        for n in bucket if c.reduce_per_unit else [held]:
            launch("zero3_grad_reduce_scatter", c.reduce_time(n), max(at, t), False)
        bucket.clear()
        held = 0.0

    def reduce(grads: float, at: float) -> None:
        nonlocal held
        if grads <= 0:
            return
        if c.reduce_bucket_params is None:
            launch("zero3_grad_reduce_scatter", c.reduce_time(grads), at, False)
            return
        if bucket and held + grads > c.reduce_bucket_params:
            flush(at)
        bucket.append(grads)
        held += grads

    offsets = [0.0] * len(blocks)
    seen = -1
    next_g = 0  # index of the next gather unit in the trace
    for dur, g, grads, bi in items:
        if g >= 0:
            if by_elements:
                if g >= issued:  # fetch the current sub-module, then prefetch
                    issue_upto(g, t)
                prefetch_batch(t)
            elif order == "pre":
                issue_upto(g + depth, t)
            else:
                issue_upto(g, t)
            next_g = g + 1
            if ready[g] > t:
                stall += ready[g] - t
                t = ready[g]
            extra = c.copy_out_time(params[g])
        else:
            if not by_elements and order == "pre" and depth >= 1:
                issue_upto(next_g - 1 + depth, t)
            extra = 0.0
        if bi != seen:
            offsets[bi] = t
            seen = bi
        stall += extra
        t += extra
        end = progress(t, dur, stream.busy, slow, stream.ends)
        slowdown += end - t - dur
        t = end
        if g >= 0:
            live -= params[g]
        if not fwd:
            copy = c.grad_copy_time(grads) if grads > 0 else 0.0
            stall += copy
            t += copy
            if g >= 0 and order == "post" and depth >= 1:
                issue_upto(g + 1, t)
            reduce(grads, t)
    if not fwd and bucket:
        flush(t)
    if stream.free > t:
        stall += stream.free - t
        t = stream.free
    return PassTrace(t, offsets, stall, slowdown, stream.comm, stream.slices)


def pass_overhead(layers: int, f: float, b: float, c: Zero3Comm, slow: float) -> tuple[float, float]:
    """(forward, backward) seconds the ZeRO-3 traffic adds to ``layers`` uniform layers of ``f``/``b`` seconds."""
    fw = run_pass("F", [(f, True)] * layers, c, slow)
    bw = run_pass("B", [(b, True)] * layers, c, slow)
    return fw.end - layers * f, bw.end - layers * b
