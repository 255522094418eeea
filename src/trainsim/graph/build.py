"""Job → execution graph: tasks on per-unit streams, dependencies and collective groups.

One graph describes one training step of one data-parallel replica (a *template* replica: every pipeline stage is one
unit, see :mod:`trainsim.parallel.layout`); the engine evaluates it for several replicas and steps at once (columns of
a matrix), which is how symmetric replicas are simulated once and asymmetric ones side by side.

Tasks and their streams (per stage):

* **compute**: one task per schedule action — forward ``F``, backward ``B`` (recompute included), weight gradient
  ``W`` (zero-bubble schedules) — timed by :mod:`trainsim.graph.blocks`; then the optimizer step;
* **pipeline send/recv**: one task per activation or gradient transfer between consecutive virtual stages. It starts
  when both ends have issued it (a rendezvous) and after the previous transfer on the same link (FIFO). How the
  compute stream waits follows Megatron: blocking batched ``send_*_recv_*`` calls between actions (1F1B, GPipe,
  ZB-H1, and the interleaved schedule without ``overlap_p2p_comm``: one batched call per step), or, for the
  interleaved schedule with ``overlap_p2p_comm`` (Megatron-Core's default), non-blocking sends and receives posted
  after the previous action of the same direction and waited for right before the consuming action;
* **data-parallel**: parameter all-gather buckets (distributed optimizer) at the start of the step — blocking the
  first forward, or pipelined with the first forward of each chunk under ``--overlap-param-gather``; gradient
  reduce-scatter (all-reduce without the distributed optimizer) buckets, launched as the last backward of a chunk
  produces them under ``--overlap-grad-reduce``, else after the backward pass. A data-parallel collective is one
  task for all replicas (it starts when the last member arrives);
* **grad sync**: layer-norm gradient all-reduce (sequence parallelism), tied-embedding all-reduce between the first
  and last stage, the wait for the remaining gradient buckets, the gradient-norm all-reduce (a global barrier,
  Megatron's ``clip_grad_norm``) and the optimizer.

The order of the gradient tail follows the released Megatron traces: layer-norm grads, embedding grads, DP grads,
grad-norm, optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from trainsim.cost.comm import Placements, placements_of
from trainsim.cost.job_costs import StageCost, ddp_bucket_params, stage_costs
from trainsim.graph.blocks import BlockLibrary, ChunkTemplate, ceil_div, zero3_costs
from trainsim.parallel.axes import Group
from trainsim.parallel.layout import Layout
from trainsim.schedule import BACKWARD, FORWARD, WEIGHT, StageOrder
from trainsim.schedule.interleaved import warmup_forwards as interleaved_warmup
from trainsim.workload.layers import shard_of
from trainsim.workload.memory import stage_parameter_split, stage_parameters
from trainsim.workload.ops import Collective, CommOp, Overlap
from trainsim.workload.sharding import sharding_of
from trainsim.workload.stages import chunk_layers

if TYPE_CHECKING:
    from trainsim.cost.job_costs import CostModel
    from trainsim.spec.job import Job


class Kind(IntEnum):
    """Task kinds."""

    FWD = 0
    BWD = 1
    WGT = 2
    SEND_F = 3  # activation transfer to the next virtual stage
    SEND_B = 4  # gradient transfer to the previous virtual stage
    PARAM_AG = 5
    GRAD_RS = 6
    LN_AR = 7
    EMB_AR = 8
    GRAD_WAIT = 9
    CLIP = 10
    OPT = 11
    ARRIVE = 12  # a member reaching a collective (zero length)
    START = 13  # start of the step on a stage (zero length)


COMPUTE_KINDS = (Kind.FWD, Kind.BWD, Kind.WGT)
P2P_KINDS = (Kind.SEND_F, Kind.SEND_B)
DP_KINDS = (Kind.PARAM_AG, Kind.GRAD_RS)
GRAD_SYNC_KINDS = (Kind.LN_AR, Kind.EMB_AR, Kind.GRAD_WAIT, Kind.CLIP)

OUT, IN = 0, 1  # link directions
P2P_MODES = ("blocking", "blocking-steps", "overlap")


@dataclass
class Graph:
    """Tasks (in topological level order), dependencies, costs and link usage of one step of one replica.

    ``pred_*``: CSR lists of start dependencies: a task starts after ``start[q] + frac·(end[q] − start[q])`` of each
    predecessor ``q`` (``frac = 1``: its end). ``endc_*``: end constraints ``end ≥ end[q] + frac·duration``
    (pipelined parameter gathers). ``levels``: boundaries of groups of tasks that only depend on earlier groups.
    ``sync``: the task is one collective for all replicas of a step (starts when the last arrives).
    """

    job: Job
    orders: tuple[StageOrder, ...]
    p2p_mode: str
    kind: np.ndarray
    stage: np.ndarray
    peer: np.ndarray
    mb: np.ndarray
    chunk: np.ndarray
    vstage: np.ndarray
    bucket: np.ndarray
    tmpl: np.ndarray
    cost: np.ndarray
    nbytes: np.ndarray
    sync: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    pred_frac: np.ndarray
    endc_ptr: np.ndarray
    endc_idx: np.ndarray
    endc_frac: np.ndarray
    levels: np.ndarray
    send_pred: np.ndarray  # per task: for transfers, the task after which the sender issued it (-1 otherwise)
    recv_pred: np.ndarray  # per task: for transfers, the task after which the receiver posted it
    templates: list[ChunkTemplate]
    stage_costs: list[StageCost]
    flows: dict[str, np.ndarray] = field(default_factory=dict)  # task, stage, dir, internode
    crosses: dict[Group, bool] = field(default_factory=dict)

    @property
    def num_tasks(self) -> int:
        """Number of tasks."""
        return len(self.kind)

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.job.parallelism.pp

    def ids(self, *kinds: Kind) -> np.ndarray:
        """Task ids of the given kinds."""
        return np.flatnonzero(np.isin(self.kind, np.asarray(kinds, dtype=np.int8)))


class _Builder:
    FIELDS = ("kind", "stage", "peer", "mb", "chunk", "vstage", "bucket", "tmpl", "cost", "nbytes", "sync")
    DTYPES: ClassVar[dict[str, type]] = {
        "kind": np.int8, "stage": np.int32, "peer": np.int32, "mb": np.int32, "chunk": np.int32, "vstage": np.int32,
        "bucket": np.int32, "tmpl": np.int32, "cost": np.float64, "nbytes": np.float64, "sync": bool}
    DEFAULTS: ClassVar[dict[str, object]] = {
        "peer": -1, "mb": -1, "chunk": -1, "vstage": -1, "bucket": -1, "tmpl": -1, "cost": 0.0, "nbytes": 0.0,
        "sync": False}

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {f: [] for f in self.FIELDS}
        self.n = 0
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.frac: list[np.ndarray] = []
        self.e_src: list[np.ndarray] = []
        self.e_dst: list[np.ndarray] = []
        self.e_frac: list[np.ndarray] = []
        self.send_pred: dict[int, int] = {}
        self.recv_pred: dict[int, int] = {}

    def add(self, count: int, **values: object) -> np.ndarray:
        ids = np.arange(self.n, self.n + count, dtype=np.int64)
        for f in self.FIELDS:
            v = values.get(f, self.DEFAULTS.get(f))
            self.cols[f].append(np.broadcast_to(np.asarray(v, dtype=self.DTYPES[f]), (count,)).copy())
        self.n += count
        return ids

    def one(self, **values: object) -> int:
        return int(self.add(1, **values)[0])

    def edge(self, src: np.ndarray | Sequence[int] | int, dst: np.ndarray | int,
             frac: np.ndarray | float = 1.0) -> None:
        s = np.atleast_1d(np.asarray(src, dtype=np.int64))
        d = np.atleast_1d(np.asarray(dst, dtype=np.int64))
        s, d = np.broadcast_arrays(s, d)
        keep = (s >= 0) & (d >= 0)
        if not keep.any():
            return
        fr = np.broadcast_to(np.asarray(frac, dtype=np.float64), s.shape)
        self.src.append(s[keep].copy())
        self.dst.append(d[keep].copy())
        self.frac.append(fr[keep].copy())

    def end_constraint(self, src: int, dst: int, frac: float) -> None:
        self.e_src.append(np.array([src], dtype=np.int64))
        self.e_dst.append(np.array([dst], dtype=np.int64))
        self.e_frac.append(np.array([frac], dtype=np.float64))


def _csr(n: int, src: np.ndarray, dst: np.ndarray, frac: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.lexsort((src, dst))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, dst + 1, 1)
    return np.cumsum(ptr), src[order], frac[order]


def _levels(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kahn's algorithm, one round per level (vectorised): a permutation into level order and level boundaries."""
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    order = np.argsort(src, kind="stable")
    s_sorted, d_by_src = src[order], dst[order]
    succ_ptr = np.searchsorted(s_sorted, np.arange(n + 1))
    ready = np.flatnonzero(indeg == 0)
    out: list[np.ndarray] = []
    bounds = [0]
    done = 0
    while ready.size:
        out.append(ready)
        done += ready.size
        bounds.append(done)
        lo, hi = succ_ptr[ready], succ_ptr[ready + 1]
        lens = hi - lo
        total = int(lens.sum())
        if total == 0:
            break
        starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
        succ = d_by_src[starts + np.arange(total)]
        np.subtract.at(indeg, succ, 1)
        cand = np.unique(succ)
        ready = cand[indeg[cand] == 0]
    if done != n:
        raise RuntimeError(f"execution graph has a cycle ({n - done} of {n} tasks never become ready)")
    return np.concatenate(out), np.asarray(bounds, dtype=np.int64)


def chunk_parameters(job: Job, stage: int) -> list[float]:
    """Parameters of each model chunk of one GPU of ``stage`` (embedding on the first, head on the last chunk)."""
    model, par = job.model, job.parallelism
    tp, v = par.tp, par.vpp
    total = stage_parameters(job, stage)
    v_h = model.padded_vocab_size(tp) * model.hidden_size / tp
    norm = model.hidden_size * (2 if model.normalization == "LayerNorm" else 1)
    emb = head = 0.0
    if stage == 0:
        emb = v_h + (model.seq_length * model.hidden_size if model.position_embedding_type == "learned_absolute"
                     else 0.0)
    if stage == job.head_stage:
        head = norm + (v_h if (model.untie_embeddings_and_output_weights or job.head_stage != 0) else 0.0)
    layers = (total - emb - head) / v
    out = [layers] * v
    out[0] += emb
    out[-1] += head
    return out


def _layernorm_parameters(job: Job, stage: int) -> float:
    model = job.model
    norm = model.hidden_size * (2 if model.normalization == "LayerNorm" else 1)
    n = 2 * job.layers_per_stage[stage] + (1 if stage == job.head_stage else 0)
    return n * norm


def buckets_of(params: float, bucket_params: float) -> np.ndarray:
    """Parameters per gradient bucket in backward order (Megatron fills buckets from the last layers)."""
    if not math.isfinite(bucket_params):
        return np.array([float(params)])
    nb = ceil_div(params, bucket_params)
    sizes = np.full(nb, float(bucket_params))
    sizes[-1] = params - bucket_params * (nb - 1)
    return sizes


class GraphBuilder:
    """Builds the :class:`Graph` of a job for a cost model."""

    def __init__(self, job: Job, model: CostModel, p2p_mode: str | None = None) -> None:
        self.job = job
        self.model = model
        par, tr = job.parallelism, job.training
        self.p, self.v, self.m = par.pp, par.vpp, job.num_microbatches
        self.pv = self.p * self.v
        self.places: Placements = placements_of(job)
        self.layout = Layout.of(job)
        self.costs = stage_costs(job, model)
        self.lib = BlockLibrary(job, model, self.places, shard_of(job))
        self.schedule = job.pipeline
        self.split = self.schedule.split_backward
        if p2p_mode is None:
            p2p_mode = self.schedule.p2p_mode(tr.overlap_p2p_comm)
        if p2p_mode not in P2P_MODES:
            raise ValueError(f"unknown p2p mode {p2p_mode!r}")
        self.p2p_mode = p2p_mode
        self.orders = self.schedule.orders(self.p, self.m, self.v, self._chunk_times())
        self.b = _Builder()
        self.templates: list[ChunkTemplate] = []
        self._tmpl_index: dict[int, int] = {}

    def _chunk_times(self) -> tuple[float, float, float]:
        """Mean chunk forward, input-gradient and weight-gradient times (for cost-aware schedule generators)."""
        n = self.p * self.v
        f = sum(c.fwd for c in self.costs) / n
        w = sum(c.total.wgrad for c in self.costs) / n
        b = sum(c.bwd for c in self.costs) / n - w
        return f, b, w

    # ---- templates --------------------------------------------------------------------------------------------
    def _chunk_layers(self, s: int, c: int) -> tuple[tuple[bool, str], ...]:
        return chunk_layers(self.job, s, c)

    def _template(self, s: int, c: int, kind: str) -> int:
        zero3 = zero3_costs(self.job, self.model, self.places, stage_parameters(self.job, s),
                            self.job.layers_per_stage[s])
        vs = int(self.schedule.vstage(self.p, s, c))
        t = self.lib.chunk(kind, self._chunk_layers(s, c), first=(vs == 0), last=(vs == self.pv - 1),
                           split=self.split, zero3=zero3)
        key = id(t)
        if key not in self._tmpl_index:
            self._tmpl_index[key] = len(self.templates)
            self.templates.append(t)
        return self._tmpl_index[key]

    # ---- build ------------------------------------------------------------------------------------------------
    def build(self) -> Graph:
        b, p, v, m, pv = self.b, self.p, self.v, self.m, self.pv
        starts = b.add(p, kind=Kind.START, stage=np.arange(p))
        # compute tasks
        kinds = "FBW" if self.split else "FB"
        tmpl_ids = np.full((p, v, 3), -1, dtype=np.int64)
        for s in range(p):
            for c in range(v):
                for k, name in enumerate(kinds):
                    tmpl_ids[s, c, k] = self._template(s, c, name)
        comp_ids: list[np.ndarray] = []
        f_id = np.full((pv, m), -1, dtype=np.int64)
        b_id = np.full((pv, m), -1, dtype=np.int64)
        w_id = np.full((pv, m), -1, dtype=np.int64)
        for s, o in enumerate(self.orders):
            vs = self.schedule.vstage(p, s, o.chunk)
            ids = b.add(len(o), kind=o.kind, stage=s, mb=o.microbatch, chunk=o.chunk, vstage=vs,
                        tmpl=tmpl_ids[s, o.chunk, o.kind])
            comp_ids.append(ids)
            for code, table in ((FORWARD, f_id), (BACKWARD, b_id), (WEIGHT, w_id)):
                sel = o.kind == code
                table[vs[sel], o.microbatch[sel]] = ids[sel]
            b.edge(ids[:-1], ids[1:])
        # transfers
        xf = np.full((pv, m), -1, dtype=np.int64)
        xb = np.full((pv, m), -1, dtype=np.int64)
        act_bytes = self._activation_bytes()
        if pv > 1:
            p2p = np.array([c.p2p for c in self.costs])
            for table, lo, step, kind in ((xf, 0, 1, Kind.SEND_F), (xb, 1, -1, Kind.SEND_B)):
                vs_x, mb_x = np.meshgrid(np.arange(lo, lo + pv - 1), np.arange(m), indexing="ij")
                send_stage, send_chunk = self.schedule.rank_of(p, vs_x.ravel())
                peer, _ = self.schedule.rank_of(p, vs_x.ravel() + step)
                local = peer == send_stage  # the turn of a V: the next chunk is on the same rank
                table[lo:lo + pv - 1] = b.add(
                    vs_x.size, kind=kind, stage=send_stage, peer=peer, mb=mb_x.ravel(), chunk=send_chunk,
                    vstage=vs_x.ravel(), cost=np.where(local, 0.0, p2p[send_stage]),
                    nbytes=np.where(local, 0.0, act_bytes)).reshape(pv - 1, m)
        tails: list[list[int]] = []
        for s, o in enumerate(self.orders):
            tails.append(self._program(s, o, comp_ids[s], starts[s], xf, xb))
        self._step_tail(starts, comp_ids, tails, b_id, w_id, f_id)
        return self._finish()

    def _activation_bytes(self) -> float:
        return shard_of(self.job).p2p_bytes(self.job.model.hidden_size)

    def _program(self, s: int, o: StageOrder, ids: np.ndarray, start: int, xf: np.ndarray,
                 xb: np.ndarray) -> list[int]:
        """Dependencies of stage ``s``'s compute actions and transfers; returns what the gradient tail waits for."""
        b, p, pv = self.b, self.p, self.pv
        n = len(o)
        kind = o.kind.astype(np.int64)
        mb = o.microbatch.astype(np.int64)
        vs = self.schedule.vstage(p, s, o.chunk)
        # a lane is one direction to one peer: forwards and backwards, and in a V each chunk's (they go to
        # different neighbours)
        side = o.chunk.astype(np.int64) % 2 if self.schedule.v_shape else np.zeros(n, dtype=np.int64)
        lanes = [(kind == code) & (side == c) for code in (FORWARD, BACKWARD) for c in np.unique(side).tolist()]
        send = np.full(n, -1, dtype=np.int64)
        recv = np.full(n, -1, dtype=np.int64)
        if pv > 1:
            sel = (kind == FORWARD) & (vs < pv - 1)
            send[sel] = xf[vs[sel], mb[sel]]
            sel = (kind == BACKWARD) & (vs > 0)
            send[sel] = xb[vs[sel], mb[sel]]
            sel = (kind == FORWARD) & (vs > 0)
            recv[sel] = xf[vs[sel] - 1, mb[sel]]
            sel = (kind == BACKWARD) & (vs < pv - 1)
            recv[sel] = xb[vs[sel] + 1, mb[sel]]
            for sel in lanes:  # FIFO per link direction, in the sender's order
                chain = send[sel & (send >= 0)]
                b.edge(chain[:-1], chain[1:])
        b.edge(start, ids[0])
        has_send = send >= 0
        if self.p2p_mode == "overlap":
            b.edge(ids[has_send], send[has_send])
            b.send_pred.update(zip(send[has_send].tolist(), ids[has_send].tolist(), strict=True))
            # a receive is posted after the previous action of the same direction; the first forward's at the
            # start, the first backward's after the last warm-up forward (Megatron-Core's recv_next)
            post = np.full(n, start, dtype=np.int64)
            for sel in lanes:
                pos = np.flatnonzero(sel)
                post[pos[1:]] = ids[pos[:-1]]
                if pos.size and pos[0] > 0 and kind[pos[0]] == BACKWARD:
                    post[pos[0]] = ids[pos[0] - 1]
            has_recv = recv >= 0
            b.edge(post[has_recv], recv[has_recv])
            b.recv_pred.update(zip(recv[has_recv].tolist(), post[has_recv].tolist(), strict=True))
            b.edge(recv[has_recv], ids[has_recv])
            tail = [int(ids[-1])]
            for sel in lanes:
                last = send[sel & has_send]
                if last.size:
                    tail.append(int(last[-1]))
            return tail
        if self.p2p_mode == "blocking-steps":
            w = interleaved_warmup(p, s, self.m, self.v)
            steady = n // 2 - w
            i = np.arange(n)
            step = np.where(i < w, i, np.where(i < w + 2 * steady, w + (i - w) // 2, i - steady))
        else:
            step = np.arange(n)
        nsteps = int(step[-1]) + 1
        bounds = np.searchsorted(step, np.arange(nsteps + 1))
        first = np.append(ids[bounds[:-1]], -1)  # first action of each step (-1: after the last step)
        last = ids[bounds[1:] - 1]
        before = np.concatenate(([start], last))  # what precedes the call in front of step j
        # sends: issued after their step; the first action of the next step (or the tail) waits
        sstep = step[has_send]
        b.edge(last[sstep], send[has_send])
        b.send_pred.update(zip(send[has_send].tolist(), last[sstep].tolist(), strict=True))
        # receives: posted in the call in front of their step
        has_recv = recv >= 0
        rstep = step[has_recv]
        rpred = before[rstep].copy()
        if self.p2p_mode == "blocking":
            # separate calls (send, then receive) unless a forward meets a backward (batched call)
            pk = np.concatenate(([-1], kind[:-1]))
            batched = ((pk == FORWARD) & (kind == BACKWARD)) | ((pk == BACKWARD) & (kind == FORWARD))
            prev_send = np.concatenate(([-1], send[:-1]))
            split_call = has_recv & ~batched & (prev_send >= 0)
            rpred = np.where(split_call[has_recv], prev_send[has_recv], rpred)
            # the action waits for its receive, or for the previous send, or both when batched
            b.edge(recv[has_recv], ids[has_recv])
            wait_send = (prev_send >= 0) & (batched | ~has_recv)
            b.edge(prev_send[wait_send], ids[wait_send])
        else:
            b.edge(recv[has_recv], first[rstep])
            b.edge(send[has_send], first[sstep + 1])
        b.edge(rpred, recv[has_recv])
        b.recv_pred.update(zip(recv[has_recv].tolist(), rpred.tolist(), strict=True))
        tail = [int(ids[-1])]
        if self.p2p_mode == "blocking":
            if has_send[-1]:
                tail.append(int(send[-1]))
        else:
            tail += send[has_send & (step == nsteps - 1)].tolist()
        return tail

    def _dp_costs(self) -> tuple[float, float, float, float]:
        sh = sharding_of(self.job)
        return sh.shards, ddp_bucket_params(self.job), sh.grad_reduce_bytes, sh.param_bytes

    def _collective(self, name: str, kind: Collective, group: Group, nbytes: float,
                    overlap: Overlap = Overlap.DP_WINDOW) -> float:
        return self.model.collective(CommOp(name, kind, group, "bwd", nbytes, overlap), self.places[group])

    def _dp_bucket(self, name: str, kind: Collective, nbytes: float, expert_frac: float) -> float:
        """A data-parallel bucket whose routed-expert share ``expert_frac`` is reduced over the expert-data-parallel
        group and the rest over dp·cp (Megatron-Core keeps separate expert buffers; priced as the two collectives)."""
        if expert_frac <= 0.0 or not self.layout.separate_expert_groups:
            return self._collective(name, kind, Group.DP_CP, nbytes)
        dense = self._collective(name, kind, Group.DP_CP, nbytes * (1.0 - expert_frac)) if expert_frac < 1 else 0.0
        return dense + self._collective(name, kind, Group.EDP, nbytes * expert_frac)

    def _expert_fraction(self, stage: int) -> float:
        dense, expert = stage_parameter_split(self.job, stage)
        return expert / (dense + expert) if dense + expert > 0 else 0.0

    def _step_tail(self, starts: np.ndarray, comp_ids: list[np.ndarray], tails: list[list[int]], b_id: np.ndarray,
                   w_id: np.ndarray, f_id: np.ndarray) -> None:
        b, p, v = self.b, self.p, self.v
        job, _tr = self.job, self.job.training
        _shards, bucket_params, grad_bytes, e = self._dp_costs()
        sh = sharding_of(job)
        gather, reduce, grad_kind = sh.gather_per_step, sh.reduce_per_step, sh.grad_collective
        ln_ids = np.empty(p, dtype=np.int64)
        rs_ids: list[list[int]] = [[] for _ in range(p)]
        dp_last: list[int] = [-1] * p
        for s in range(p):
            params = chunk_parameters(job, s)
            frac = self._expert_fraction(s)
            dp_prev = int(starts[s])
            # parameter all-gather: chunks in forward order, buckets from the first layers
            if gather:
                last_ag = -1
                for c in range(v):
                    sizes = buckets_of(params[c], bucket_params)[::-1]
                    first_f = int(f_id[int(self.schedule.vstage(p, s, c)), self._first_mb(s, c, FORWARD)])
                    done = 0.0
                    for k, size in enumerate(sizes):
                        nb = size * e
                        t = b.one(kind=Kind.PARAM_AG, stage=s, chunk=c, bucket=len(sizes) - 1 - k, sync=True,
                                  cost=self._dp_bucket("param_gather", "all_gather", nb, frac), nbytes=nb)
                        b.edge(dp_prev, t)
                        dp_prev = last_ag = t
                        if sh.overlap_param_gather:
                            if k == 0:
                                b.edge(t, first_f)
                            b.end_constraint(t, first_f, 1.0 - done / params[c])
                        done += size
                if not sh.overlap_param_gather and last_ag >= 0:
                    b.edge(last_ag, comp_ids[s][0])
            # DeepSpeed ZeRO-2: the earlier backwards' reductions, each waited for before the next action
            if reduce and sh.reduce_per_microbatch:
                dp_prev = self._microbatch_reductions(s, comp_ids[s], w_id if self.split else b_id, dp_prev)
            # gradient buckets launched during the backward pass
            if reduce and sh.overlap_grad_reduce:
                grad_src = w_id if self.split else b_id
                order = sorted(range(v), key=lambda c: self._last_position(s, c))
                for c in order:
                    last_bwd = int(grad_src[int(self.schedule.vstage(p, s, c)), self._last_mb(s, c)])
                    sizes = buckets_of(params[c], bucket_params)
                    cum = np.cumsum(sizes) / params[c]
                    for k, size in enumerate(sizes):
                        nb = size * grad_bytes
                        t = b.one(kind=Kind.GRAD_RS, stage=s, chunk=c, bucket=k, sync=True,
                                  cost=self._dp_bucket("grad_bucket", grad_kind, nb, frac), nbytes=nb)
                        b.edge(dp_prev, t)
                        b.edge(last_bwd, t, float(min(1.0, cum[k])))
                        dp_prev = t
                        rs_ids[s].append(t)
            dp_last[s] = dp_prev
            # layer-norm gradients (all-reduce over TP with sequence parallelism)
            ln_cost = 0.0
            if job.sequence_parallel:
                ln_cost = self._collective("layernorm_grads", "all_reduce", Group.TP,
                                           _layernorm_parameters(job, s) * grad_bytes)
            ln = b.one(kind=Kind.LN_AR, stage=s, cost=ln_cost)
            b.edge(np.asarray(tails[s]), ln)
            ln_ids[s] = ln
        gs_last = ln_ids.copy()
        head = job.head_stage
        tied = head != 0 and not job.model.untie_embeddings_and_output_weights
        if tied:
            arrive = b.add(2, kind=Kind.ARRIVE, stage=np.array([0, head]))
            b.edge(ln_ids[[0, head]], arrive)
            emb = b.one(kind=Kind.EMB_AR, stage=0, peer=head, cost=self.costs[0].embedding_sync)
            b.edge(arrive, emb)
            gs_last[[0, head]] = emb
        for s in range(p):
            if reduce and not sh.overlap_grad_reduce:
                params = chunk_parameters(job, s)
                frac = self._expert_fraction(s)
                prev = int(gs_last[s])
                for c in reversed(range(v)):
                    for k, size in enumerate(buckets_of(params[c], bucket_params)):
                        nb = size * grad_bytes
                        t = b.one(kind=Kind.GRAD_RS, stage=s, chunk=c, bucket=k, sync=True,
                                  cost=self._dp_bucket("grad_bucket", grad_kind, nb, frac), nbytes=nb)
                        b.edge([prev, dp_last[s]], t)
                        prev = dp_last[s] = t
                        rs_ids[s].append(t)
                gs_last[s] = prev
            elif reduce and rs_ids[s]:
                wait = b.one(kind=Kind.GRAD_WAIT, stage=s)
                b.edge([int(gs_last[s]), rs_ids[s][-1]], wait)
                gs_last[s] = wait
        arrive = b.add(p, kind=Kind.ARRIVE, stage=np.arange(p))
        b.edge(gs_last, arrive)
        clip_cost = self.model.collective(CommOp("grad_norm", "all_reduce", Group.WORLD, "bwd", 4.0),
                                          self.places[Group.WORLD])
        clip = b.one(kind=Kind.CLIP, stage=0, peer=p - 1, cost=clip_cost, sync=True)
        b.edge(arrive, clip)
        opt = b.add(p, kind=Kind.OPT, stage=np.arange(p), cost=np.array([c.optimizer for c in self.costs]))
        b.edge(clip, opt)
        b.edge(np.array([ids[-1] for ids in comp_ids]), opt)

    def _microbatch_reductions(self, s: int, comp: np.ndarray, grad_src: np.ndarray, dp_prev: int) -> int:
        """DeepSpeed ZeRO-2: every backward but the step's last reduces its gradients bucket by bucket (under the
        backward with ``overlap_comm``, after it without), and the stage's next action waits for them (the backward
        epilogue); the last backward's reductions are the step tail's. Returns the last reduction."""
        b, p = self.b, self.p
        job = self.job
        _shards, bucket_params, grad_bytes, _e = self._dp_costs()
        sh = sharding_of(job)
        params = chunk_parameters(job, s)
        frac = self._expert_fraction(s)
        for c in range(self.v):
            vs = int(self.schedule.vstage(p, s, c))
            sizes = buckets_of(params[c], bucket_params)
            cum = np.cumsum(sizes) / params[c]
            last = self._last_mb(s, c)
            for mb in range(self.m):
                bwd = int(grad_src[vs, mb])
                if mb == last or bwd < 0:
                    continue
                for k, size in enumerate(sizes):
                    nb = size * grad_bytes
                    t = b.one(kind=Kind.GRAD_RS, stage=s, chunk=c, bucket=k, mb=mb, sync=True,
                              cost=self._dp_bucket("grad_bucket", sh.grad_collective, nb, frac), nbytes=nb)
                    b.edge(dp_prev, t)
                    b.edge(bwd, t, float(min(1.0, cum[k])) if sh.overlap_grad_reduce else 1.0)
                    dp_prev = t
                nxt = bwd - int(comp[0]) + 1  # a stage's actions have consecutive ids, in program order
                if nxt < len(comp):
                    b.edge(dp_prev, int(comp[nxt]))
        return dp_prev

    def _first_mb(self, s: int, c: int, code: int) -> int:
        o = self.orders[s]
        sel = np.flatnonzero((o.kind == code) & (o.chunk == c))
        return int(o.microbatch[sel[0]])

    def _last_mb(self, s: int, c: int) -> int:
        o = self.orders[s]
        code = WEIGHT if self.split else BACKWARD
        sel = np.flatnonzero((o.kind == code) & (o.chunk == c))
        return int(o.microbatch[sel[-1]])

    def _last_position(self, s: int, c: int) -> int:
        o = self.orders[s]
        code = WEIGHT if self.split else BACKWARD
        return int(np.flatnonzero((o.kind == code) & (o.chunk == c))[-1])

    def _finish(self) -> Graph:
        b = self.b
        n = b.n
        cols = {f: np.concatenate(b.cols[f]) for f in b.FIELDS}
        src = np.concatenate(b.src) if b.src else np.zeros(0, dtype=np.int64)
        dst = np.concatenate(b.dst) if b.dst else np.zeros(0, dtype=np.int64)
        frac = np.concatenate(b.frac) if b.frac else np.zeros(0)
        e_src = np.concatenate(b.e_src) if b.e_src else np.zeros(0, dtype=np.int64)
        e_dst = np.concatenate(b.e_dst) if b.e_dst else np.zeros(0, dtype=np.int64)
        e_frac = np.concatenate(b.e_frac) if b.e_frac else np.zeros(0)
        # end constraints are dependencies too (for the level order)
        perm, levels = _levels(n, np.concatenate((src, e_src)), np.concatenate((dst, e_dst)))
        new = np.empty(n, dtype=np.int64)
        new[perm] = np.arange(n)
        cols = {f: a[perm] for f, a in cols.items()}
        pred_ptr, pred_idx, pred_frac = _csr(n, new[src], new[dst], frac)
        endc_ptr, endc_idx, endc_frac = _csr(n, new[e_src], new[e_dst], e_frac)
        send_pred = np.full(n, -1, dtype=np.int64)
        recv_pred = np.full(n, -1, dtype=np.int64)
        for mapping, arr in ((b.send_pred, send_pred), (b.recv_pred, recv_pred)):
            if mapping:
                k = np.fromiter(mapping.keys(), dtype=np.int64, count=len(mapping))
                val = np.fromiter(mapping.values(), dtype=np.int64, count=len(mapping))
                arr[new[k]] = np.where(val >= 0, new[np.maximum(val, 0)], -1)
        g = Graph(self.job, self.orders, self.p2p_mode, cols["kind"], cols["stage"], cols["peer"], cols["mb"],
                  cols["chunk"], cols["vstage"], cols["bucket"], cols["tmpl"], cols["cost"], cols["nbytes"],
                  cols["sync"], pred_ptr, pred_idx, pred_frac, endc_ptr, endc_idx, endc_frac, levels, send_pred,
                  recv_pred, self.templates, self.costs)
        g.crosses = {name: place.crosses_nodes for name, place in self.places.items()}
        g.flows = self._flows(g)
        return g

    def _flows(self, g: Graph) -> dict[str, np.ndarray]:
        """Which tasks load which unit's links: (task, stage, direction, internode) rows."""
        rows: list[tuple[np.ndarray, np.ndarray, int, np.ndarray | bool]] = []
        p2p = g.ids(*P2P_KINDS)
        if p2p.size:
            crosses = self.layout.p2p_crosses_nodes()[0]  # replica 0's links: s -> s + 1 (mod pp)
            p2p = p2p[g.stage[p2p] != g.peer[p2p]]  # the turn of a V stays on its rank
            a, c = g.stage[p2p].astype(np.int64), g.peer[p2p].astype(np.int64)
            # link s joins s and s + 1 (mod pp), whichever way the transfer goes
            link = np.where(c == (a + 1) % self.p, a, c)
            inter = crosses[link]
            rows.append((p2p, g.stage[p2p], OUT, inter))
            rows.append((p2p, g.peer[p2p], IN, inter))
        dp = g.ids(*DP_KINDS)
        if dp.size:
            inter = np.full(dp.size, g.crosses[Group.DP_CP])
            rows.append((dp, g.stage[dp], OUT, inter))
            rows.append((dp, g.stage[dp], IN, inter))
        emb = g.ids(Kind.EMB_AR)
        if emb.size:
            inter = np.full(2 * emb.size, g.crosses[Group.EMBEDDING])
            both = np.concatenate((emb, emb))
            st = np.concatenate((g.stage[emb], g.peer[emb]))
            rows.append((both, st, OUT, inter))
            rows.append((both, st, IN, inter))
        comp = g.ids(*COMPUTE_KINDS)
        inter_t = np.array([t.total.internode > 0 for t in g.templates], dtype=bool)
        comp = comp[inter_t[g.tmpl[comp]]] if comp.size and inter_t.size else comp[:0]
        if comp.size:
            rows.append((comp, g.stage[comp], OUT, np.ones(comp.size, dtype=bool)))
            rows.append((comp, g.stage[comp], IN, np.ones(comp.size, dtype=bool)))
        if not rows:
            return {"task": np.zeros(0, np.int64), "stage": np.zeros(0, np.int64), "dir": np.zeros(0, np.int64),
                    "internode": np.zeros(0, bool)}
        return {
            "task": np.concatenate([r[0] for r in rows]).astype(np.int64),
            "stage": np.concatenate([np.asarray(r[1]) for r in rows]).astype(np.int64),
            "dir": np.concatenate([np.full(len(r[0]), r[2]) for r in rows]).astype(np.int64),
            "internode": np.concatenate([np.broadcast_to(np.asarray(r[3]), (len(r[0]),)) for r in rows]),
        }


def build_graph(job: Job, model: CostModel, p2p_mode: str | None = None) -> Graph:
    """The execution graph of one step of ``job`` (see module docstring)."""
    return GraphBuilder(job, model, p2p_mode).build()
