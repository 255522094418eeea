"""Dependency model of one training step of one data-parallel replica (the paper's section 3.2).

The model is built from one reference step of DP rank 0 and shared by every step and DP rank (the caller
checks that they have the same structure). Each stage's operations sit on streams:

* the compute stream (forward and backward compute) in observed start order;
* four independent FIFO streams: forward-send, forward-recv, backward-send, backward-recv. The k-th valid send
  of stage s pairs with the k-th valid receive of the peer stage, and each pair is one communication group;
* a send depends on the compute whose output it ships; receive k is posted after compute k-1 of the same
  direction and compute k waits for receive k; the first backward send/receive also waits for the forward
  compute two positions before the stage's first backward compute (the warm-up to steady-state transition of
  1F1B);
* receives that start after the last compute of their direction started, and sends that end before the first
  compute of their direction ended, are no-ops (a tolerance ``eps`` absorbs clock skew). So are sends/receives
  whose peer model chunk lies outside the model (interleaved schedules). No-ops are communication groups of
  one member;
* the DP stream: params-all-gather and grads-reduce-scatter in start order, each synchronised across all DP
  ranks of the stage; the first forward of each model chunk waits for the chunk's (last) params-all-gather,
  and with overlapped gradient reduction the chunk's first reduce-scatter waits for its last backward;
* the tail: last compute -> gc -> layernorm-grads-all-reduce (local) -> embedding-grads-all-reduce (group of
  the first and last stage of the replica) -> grads-reduce-scatters (or, with overlapped reduction, after the
  last reduce-scatter: separate-grads-all-reduce) -> optimizer-clip-main-grad (one group over all stages,
  synchronised across DP ranks: a global barrier) -> optimizer.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.io.frames import as_int
from trainsim.io.traces import (
    BACKWARD_COMPUTE,
    BACKWARD_RECV,
    BACKWARD_SEND,
    COMM_OPTYPES,
    DP_COMM_OPTYPES,
    EMBEDDING_GRADS_ALL_REDUCE,
    FORWARD_COMPUTE,
    FORWARD_RECV,
    FORWARD_SEND,
    GC,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_GRADS_ALL_REDUCE,
    OPTIMIZER,
    OPTIMIZER_CLIP_MAIN_GRAD,
    P2P_OPTYPES,
    PARAMS_ALL_GATHER,
    SEPARATE_GRADS_ALL_REDUCE,
)

#: Default clock-skew tolerance (seconds) when classifying pipeline sends/receives as no-ops.
DEFAULT_EPS = 5e-5

#: Stream (timeline thread) of each operation type.
STREAM_OF: dict[str, str] = {
    FORWARD_COMPUTE: "compute",
    BACKWARD_COMPUTE: "compute",
    GC: "compute",
    OPTIMIZER: "compute",
    FORWARD_SEND: "forward-send",
    FORWARD_RECV: "forward-recv",
    BACKWARD_SEND: "backward-send",
    BACKWARD_RECV: "backward-recv",
    PARAMS_ALL_GATHER: "dp-comm",
    GRADS_REDUCE_SCATTER: "dp-comm",
    SEPARATE_GRADS_ALL_REDUCE: "dp-comm",
    LAYERNORM_GRADS_ALL_REDUCE: "grad-sync",
    EMBEDDING_GRADS_ALL_REDUCE: "grad-sync",
    OPTIMIZER_CLIP_MAIN_GRAD: "grad-sync",
}
STREAMS: tuple[str, ...] = (
    "compute",
    "forward-send",
    "forward-recv",
    "backward-send",
    "backward-recv",
    "dp-comm",
    "grad-sync",
)

# peer-stage offset of each pipeline send/receive
_P2P_DELTA = {FORWARD_SEND: 1, FORWARD_RECV: -1, BACKWARD_SEND: -1, BACKWARD_RECV: 1}
_P2P_PEER = {
    FORWARD_SEND: FORWARD_RECV,
    FORWARD_RECV: FORWARD_SEND,
    BACKWARD_SEND: BACKWARD_RECV,
    BACKWARD_RECV: BACKWARD_SEND,
}
_TAIL_SINGLETONS = (
    GC,
    LAYERNORM_GRADS_ALL_REDUCE,
    EMBEDDING_GRADS_ALL_REDUCE,
    SEPARATE_GRADS_ALL_REDUCE,
    OPTIMIZER_CLIP_MAIN_GRAD,
    OPTIMIZER,
)


@dataclasses.dataclass(frozen=True)
class DepNode:
    """One scheduling unit: a local operation, or a communication group that completes together."""

    members: np.ndarray  #: operation ids (one for a local op)
    deps: tuple[np.ndarray, ...]  #: per member, the ids of the operations it waits for
    is_group: bool  #: communication group (members end at the group's latest start + own transfer time)
    dp_sync: bool  #: the group's latest start is also taken across all DP ranks


@dataclasses.dataclass(frozen=True)
class DependencyModel:
    """Operations of one step of one DP replica, their dependencies and communication groups.

    ``ops`` has one row per operation (index = op id) with columns ``stage, optype, seq_id, mc, gmc, mb_id,
    name, stream, group, is_comm, no_op, comm_family``. ``is_comm`` marks members of a communication group
    (simulated with their transfer time), ``comm_family`` marks operation types that are communication in
    nature (idealized with the median even when simulated as a local op, like layernorm-grads-all-reduce).
    """

    ops: pd.DataFrame
    deps: tuple[np.ndarray, ...]
    groups: tuple[np.ndarray, ...]
    group_dp_sync: np.ndarray
    schedule: tuple[DepNode, ...]
    num_stages: int
    reference_step: int
    reference_dp_rank: int
    overlapped_grad_reduce: bool
    compute_order: tuple[np.ndarray, ...]  #: per stage, compute-stream op ids in execution order
    #: expert-parallel coupling: per traced DP rank (in ``dp_ranks`` order) the index of its expert group, or None.
    #: Forward/backward compute of the members of one group end together (the MoE all-to-alls in every layer).
    ep_groups: np.ndarray | None = None

    @property
    def num_ops(self) -> int:
        """Number of operations per step and DP replica."""
        return len(self.ops)

    def op_id(self, stage: int, optype: str, seq_id: int) -> int:
        """Id of an operation, or -1 when the model has no such operation."""
        hit = self.ops.index[
            (self.ops["stage"].to_numpy() == stage)
            & (self.ops["optype"].to_numpy() == optype)
            & (self.ops["seq_id"].to_numpy() == seq_id)
        ]
        return int(hit[0]) if len(hit) else -1

    def describe(self, op: int) -> str:
        """Human-readable name of an operation: ``<optype> #<seq_id> on stage <s>``."""
        row = self.ops.loc[op]
        return f"{row.optype} #{as_int(row.seq_id)} on stage {as_int(row.stage)}"


def _order(frame: pd.DataFrame) -> np.ndarray:
    """Row positions sorted by (start, seq_id, optype), the reference's execution order."""
    return np.lexsort((frame["optype"].to_numpy(), frame["seq_id"].to_numpy(), frame["start_ts"].to_numpy()))


def build_dependency_model(
    ref: pd.DataFrame,
    *,
    pp_size: int,
    use_dp: bool,
    eps: float = DEFAULT_EPS,
    reference_step: int = 0,
    reference_dp_rank: int = 0,
) -> DependencyModel:
    """Build the dependency model from the operations of one step of one DP replica.

    ``ref`` is a validated released-schema table restricted to one step and one DP rank, holding every stage.
    ``use_dp`` says whether data-parallel collectives synchronise several replicas
    (``dp_size * dsp_size > 1``).
    """
    ops = ref.sort_values(["stage", "optype", "seq_id"], kind="stable").reset_index(drop=True)
    ops["end_ts"] = ops["start_ts"] + ops["duration"]
    n = len(ops)
    stages = sorted(int(s) for s in ops["stage"].unique())
    if stages != list(range(pp_size)):
        missing = sorted(set(range(pp_size)) - set(stages))
        raise TrainsimError(
            "trace.stage",
            f"stages {missing} are not traced at step {reference_step}, "
            f"dp_rank {reference_dp_rank} (pp_size={pp_size})",
            "trace one GPU of every pipeline stage",
        )
    pp = pp_size
    num_chunks = (int(ops["mc"].max()) + 1) * pp
    opt = ops["optype"].to_numpy()
    stage_of = ops["stage"].to_numpy()
    seq = ops["seq_id"].to_numpy()
    key = {(int(stage_of[i]), str(opt[i]), int(seq[i])): i for i in range(n)}
    deps: list[list[int]] = [[] for _ in range(n)]

    def chain(ids: list[int] | np.ndarray, first: list[int] | None = None) -> None:
        prev = list(first or [])
        for i in ids:
            deps[int(i)].extend(prev)
            prev = [int(i)]

    def where(stage: int, *types: str) -> pd.DataFrame:
        return ops[(stage_of == stage) & np.isin(opt, types)]

    no_op = np.zeros(n, dtype=bool)
    valid_key: dict[tuple[str, int, int], int] = {}  # (optype, k-th valid, stage) -> op id
    compute_order: list[np.ndarray] = []
    overlapped = bool((opt == SEPARATE_GRADS_ALL_REDUCE).any())
    groups: list[list[int]] = []
    group_sync: list[bool] = []

    for s in stages:
        comp = where(s, FORWARD_COMPUTE, BACKWARD_COMPUTE)
        comp_ids = comp.index.to_numpy()[_order(comp)]
        compute_order.append(comp_ids)
        comp_of: dict[tuple[str, int], int] = {(str(opt[i]), int(seq[i])): int(i) for i in comp_ids}
        # --- pipeline sends/receives: matching with compute, no-ops
        for direction in ("forward", "backward"):
            ctype = f"{direction}-compute"
            tcomp = comp[comp["optype"] == ctype]
            n_comp = len(tcomp)
            last_start = float(tcomp["start_ts"].max()) if n_comp else np.nan
            first_end = float(tcomp["end_ts"].min()) if n_comp else np.nan
            for kind in ("send", "recv"):
                ptype = f"{direction}-{kind}"
                comm = where(s, ptype)
                comm_ids = comm.index.to_numpy()[_order(comm)]
                if kind == "recv":
                    valid = ops.loc[comm_ids, "start_ts"].to_numpy() <= last_start + eps
                else:
                    valid = ops.loc[comm_ids, "end_ts"].to_numpy() >= first_end - eps
                cnt = int(valid.sum())
                cid = 0
                if cnt != n_comp:
                    if s not in (0, pp - 1) or not (cnt == 0 or cnt + 1 == n_comp):
                        raise TrainsimError(
                            "trace",
                            f"stage {s} has {cnt} active {ptype} ops for {n_comp} {ctype} ops at step "
                            f"{reference_step}, dp_rank {reference_dp_rank}",
                            "every micro-batch needs its pipeline send/receive; check the trace is complete",
                        )
                    if kind == "recv" and cnt + 1 == n_comp:
                        cid = 1  # the first receive is not traced: start matching at the second compute
                no_op[comm_ids[~valid]] = True
                for i in comm_ids[valid]:
                    compute = comp_of[(ctype, cid)]
                    peer_chunk = as_int(ops.at[compute, "gmc"]) + _P2P_DELTA[ptype]
                    no_op[i] = peer_chunk < 0 or peer_chunk >= num_chunks
                    if kind == "send":
                        deps[int(i)].append(compute)  # compute -> send
                    else:
                        deps[compute].append(int(i))  # recv -> compute
                        if cid >= 1:
                            deps[int(i)].append(comp_of[(ctype, cid - 1)])  # compute k-1 -> recv k
                    cid += 1
                k = 0
                for i in comm_ids:
                    if not no_op[i]:
                        valid_key[(ptype, k, s)] = int(i)
                        k += 1
                chain(comm_ids)
        # --- compute stream
        chain(comp_ids)
        is_bwd = opt[comp_ids] == BACKWARD_COMPUTE
        if is_bwd.any():
            first_bwd = int(np.argmax(is_bwd))
            if first_bwd >= 2:
                if not (opt[comp_ids[first_bwd - 1]] == FORWARD_COMPUTE == opt[comp_ids[first_bwd - 2]]):
                    raise TrainsimError(
                        "trace",
                        f"stage {s}: the two compute ops before the first backward are not both forward",
                        "only GPipe/1F1B-style schedules (optionally interleaved) are supported",
                    )
                warmup = int(comp_ids[first_bwd - 2])
                for ptype in (BACKWARD_RECV, BACKWARD_SEND):
                    first = key.get((s, ptype, 0))
                    if first is not None:
                        deps[first].append(warmup)
        # --- DP stream
        dp_ops = where(s, PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER)
        chain(dp_ops.index.to_numpy()[_order(dp_ops)])
        fwd = comp[comp["optype"] == FORWARD_COMPUTE]
        bwd = comp[comp["optype"] == BACKWARD_COMPUTE]
        fwd_sorted = fwd.index.to_numpy()[_order(fwd)]
        seen: set[int] = set()
        ag = where(s, PARAMS_ALL_GATHER).sort_values("seq_id", ascending=False)
        for mc, i in zip(ag["mc"].to_numpy(), ag.index.to_numpy(), strict=True):
            if int(mc) in seen:
                continue  # the chunk's first forward waits for the chunk's last all-gather
            chunk_fwd = fwd_sorted[ops.loc[fwd_sorted, "mc"].to_numpy() == mc]
            if len(chunk_fwd) == 0:
                raise TrainsimError(
                    "trace",
                    f"stage {s}: params-all-gather of model chunk {mc} has no forward compute",
                    "check the 'mc' column",
                )
            deps[int(chunk_fwd[0])].append(int(i))
            seen.add(int(mc))
        rs = where(s, GRADS_REDUCE_SCATTER).sort_values("seq_id")
        if overlapped:
            seen_rs: set[int] = set()
            bwd_sorted = bwd.index.to_numpy()[_order(bwd)]
            for mc, i in zip(rs["mc"].to_numpy(), rs.index.to_numpy(), strict=True):
                if int(mc) in seen_rs:
                    continue  # the chunk's first reduce-scatter waits for the chunk's last backward
                chunk_bwd = bwd_sorted[ops.loc[bwd_sorted, "mc"].to_numpy() == mc]
                if len(chunk_bwd) == 0:
                    raise TrainsimError(
                        "trace",
                        f"stage {s}: grads-reduce-scatter of model chunk {mc} has no backward compute",
                        "check the 'mc' column",
                    )
                deps[int(i)].append(int(chunk_bwd[np.argmax(ops.loc[chunk_bwd, "end_ts"].to_numpy())]))
                seen_rs.add(int(mc))
        # --- tail
        tail: dict[str, int] = {}
        for t in _TAIL_SINGLETONS:
            ids = where(s, t).index.to_numpy()
            if len(ids) > 1:
                raise TrainsimError(
                    "trace",
                    f"stage {s} has {len(ids)} {t!r} ops in step {reference_step}",
                    f"a step holds at most one {t!r} per rank",
                )
            if len(ids):
                tail[t] = int(ids[0])
        if OPTIMIZER not in tail:
            raise TrainsimError(
                "trace",
                f"stage {s} has no 'optimizer' op at step {reference_step}, dp_rank {reference_dp_rank}",
                "every step must end with an optimizer op on every rank",
            )
        if EMBEDDING_GRADS_ALL_REDUCE in tail and s not in (0, pp - 1):
            raise TrainsimError(
                "trace",
                f"embedding-grads-all-reduce on stage {s}",
                "it runs only on the first and the last pipeline stage",
            )
        if len(comp_ids) == 0:
            raise TrainsimError(
                "trace",
                f"stage {s} has no forward/backward compute at step {reference_step}",
                "trace the compute operations",
            )
        last_compute = int(comp_ids[int(np.argmax(ops.loc[comp_ids, "end_ts"].to_numpy()))])
        head = [last_compute]
        if GC in tail:
            deps[tail[GC]].append(last_compute)
            head = [tail[GC]]
        rs_ids = [int(i) for i in rs.index.to_numpy()]
        body = [tail[t] for t in (LAYERNORM_GRADS_ALL_REDUCE, EMBEDDING_GRADS_ALL_REDUCE) if t in tail]
        if overlapped:
            if rs_ids:
                head = [rs_ids[-1], *head]
            body += [tail[t] for t in (SEPARATE_GRADS_ALL_REDUCE,) if t in tail]
        else:
            body += rs_ids
        body += [tail[t] for t in (OPTIMIZER_CLIP_MAIN_GRAD, OPTIMIZER) if t in tail]
        chain(body, head)

    # --- communication groups
    for (ptype, k, s), i in sorted(valid_key.items(), key=lambda kv: kv[1]):
        peer = valid_key.get((_P2P_PEER[ptype], k, (s + _P2P_DELTA[ptype]) % pp))
        if peer is None:
            raise TrainsimError(
                "trace",
                f"unmatched pipeline communication: {ptype} #{k} (active) of stage {s} has no matching "
                f"{_P2P_PEER[ptype]} on stage {(s + _P2P_DELTA[ptype]) % pp} at step {reference_step}, "
                f"dp_rank {reference_dp_rank}",
                "the k-th send of a stage must meet the k-th receive of its peer; check "
                "for missing or extra send/recv ops",
            )
        if i < peer:
            groups.append([i, peer])
            group_sync.append(False)
    for i in np.flatnonzero(no_op & np.isin(opt, P2P_OPTYPES)):
        groups.append([int(i)])
        group_sync.append(False)
    if use_dp:
        for i in np.flatnonzero(np.isin(opt, DP_COMM_OPTYPES)):
            groups.append([int(i)])
            group_sync.append(True)
    for t, wanted, sync in (
        (EMBEDDING_GRADS_ALL_REDUCE, sorted({0, pp - 1}), False),
        (OPTIMIZER_CLIP_MAIN_GRAD, list(range(pp)), True),
    ):
        present = sorted(int(stage_of[i]) for i in np.flatnonzero(opt == t))
        if not present:
            continue
        if present != wanted:
            raise TrainsimError(
                "trace",
                f"{t} is traced on stages {present} but must be on stages {wanted}",
                "trace it on every stage that takes part in it",
            )
        groups.append([int(i) for i in np.flatnonzero(opt == t)])
        group_sync.append(sync)

    group_of = np.full(n, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    ops = ops.drop(columns=["end_ts"])
    ops["name"] = [f"{t}_{q}_{st}" for t, q, st in zip(opt, seq, stage_of, strict=True)]
    ops["stream"] = [STREAM_OF[t] for t in opt]
    ops["group"] = group_of
    ops["is_comm"] = group_of >= 0
    ops["no_op"] = no_op
    ops["comm_family"] = np.isin(opt, COMM_OPTYPES)
    dep_arrays = tuple(np.array(sorted(set(d)), dtype=np.int64) for d in deps)
    schedule = _schedule(ops, dep_arrays, groups, group_sync)
    return DependencyModel(
        ops=ops.drop(columns=["start_ts", "duration"]),
        deps=dep_arrays,
        groups=tuple(np.array(g, dtype=np.int64) for g in groups),
        group_dp_sync=np.array(group_sync, dtype=bool),
        schedule=schedule,
        num_stages=pp,
        reference_step=reference_step,
        reference_dp_rank=reference_dp_rank,
        overlapped_grad_reduce=overlapped,
        compute_order=tuple(compute_order),
    )


def _schedule(
    ops: pd.DataFrame, deps: tuple[np.ndarray, ...], groups: list[list[int]], group_sync: list[bool]
) -> tuple[DepNode, ...]:
    """Topological order of nodes (local ops and communication groups); a cycle is an error."""
    n = len(ops)
    group_of = ops["group"].to_numpy()
    local = np.flatnonzero(group_of < 0)
    node_of = np.empty(n, dtype=np.int64)
    node_of[local] = np.arange(len(local))
    node_of[group_of >= 0] = len(local) + group_of[group_of >= 0]
    num_nodes = len(local) + len(groups)
    members: list[np.ndarray] = [np.array([i]) for i in local] + [np.array(g, dtype=np.int64) for g in groups]
    succ: list[set[int]] = [set() for _ in range(num_nodes)]
    indeg = np.zeros(num_nodes, dtype=np.int64)
    for v in range(n):
        for u in deps[v]:
            a, b = int(node_of[u]), int(node_of[v])
            if a == b:
                raise TrainsimError(
                    "trace",
                    f"{ops.at[v, 'name']} waits for {ops.at[int(u), 'name']} of its own communication group",
                    "the trace's op order is inconsistent",
                )
            if b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    queue = deque(int(x) for x in np.flatnonzero(indeg == 0))
    order: list[int] = []
    while queue:
        a = queue.popleft()
        order.append(a)
        for b in sorted(succ[a]):
            indeg[b] -= 1
            if indeg[b] == 0:
                queue.append(b)
    if len(order) != num_nodes:
        stuck = [ops.at[int(m), "name"] for b in np.flatnonzero(indeg > 0)[:4] for m in members[b][:1]]
        raise TrainsimError(
            "trace",
            f"the dependency model has a cycle (involving {stuck})",
            "the reference step's op order is inconsistent; choose other --steps",
        )
    nodes = []
    for a in order:
        mem = members[a]
        is_group = a >= len(local)
        nodes.append(
            DepNode(
                members=mem,
                deps=tuple(deps[int(m)] for m in mem),
                is_group=is_group,
                dp_sync=bool(group_sync[a - len(local)]) if is_group else False,
            )
        )
    return tuple(nodes)
