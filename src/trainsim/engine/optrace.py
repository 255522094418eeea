"""Export a simulated run as an op trace in the released straggler-trace schema (``trainsim whatif`` reads it).

Like the released Megatron traces, one GPU is traced per (data-parallel rank, stage): tensor-parallel rank 0 (and
context-parallel rank 0; context-parallel replicas appear as ``dsp_size``, ranks that join the gradient
synchronisation without being traced). Every data-parallel replica is expanded from its class; every requested step
is written (identical steps repeat the simulated one).

Operations and their times (``start_ts`` from the start of the step; communication includes waiting for peers):

* ``forward-compute`` / ``backward-compute`` per action (``mc`` local chunk, ``gmc`` virtual stage, ``mb_id``);
* ``forward-send`` / ``backward-send`` from when the sender issued the transfer, ``forward-recv`` /
  ``backward-recv`` from when the receiver posted it, both until the transfer ends. With virtual stages every action
  has its send and receive, zero-length where the peer chunk lies outside the model (as Megatron records them);
* ``params-all-gather`` and ``grads-reduce-scatter`` per model chunk (its buckets merged), from the rank's arrival;
  the data-parallel gradient all-reduce without the distributed optimizer is also written as
  ``grads-reduce-scatter``, the schema's data-parallel gradient operation;
* ``layernorm-grads-all-reduce``, ``embedding-grads-all-reduce`` (first and last stage),
  ``separate-grads-all-reduce`` (with ``--overlap-grad-reduce``: waiting for the last buckets),
  ``optimizer-clip-main-grad`` (the gradient-norm barrier, from the rank's arrival), ``optimizer`` and a zero-length
  ``gc`` after the last computation.

The released schema has no weight-gradient operation, so ZB-H1 runs (split backward) cannot be exported.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from trainsim.engine.timeline import Timeline
from trainsim.errors import TrainsimError
from trainsim.graph.build import Kind
from trainsim.io import traces as tr
from trainsim.io.frames import as_int


def _trial_name(meta_path: str | os.PathLike[str] | None, default: str) -> str:
    if meta_path is not None:
        stem = Path(meta_path).name
        for suffix in (".yaml", ".yml"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
        if stem.startswith("meta-") and len(stem) > 5:
            return stem[5:]
    return default


def trace_meta(tl: Timeline, trial_name: str) -> tr.TraceMeta:
    """Released-schema metadata of a simulated job."""
    par = tl.job.parallelism
    groups: tuple[int, ...] = ()
    if par.ep > 1:
        from trainsim.parallel.layout import Layout

        groups = tuple(int(x) for x in Layout.of(tl.job).ep_coupling())
    return tr.TraceMeta(trial_name=trial_name, dp_size=tl.job.dp, pp_size=par.pp, tp_size=par.tp,
                        dsp_size=par.cp, vpp_size=par.vpp, ep_groups=groups)


def _unit_ops(tl: Timeline) -> pd.DataFrame:
    """One row per operation of one traced GPU of every stage: optype, stage, task whose end is the op's end,
    where its start comes from (``start_kind``: start | end | arrive, of ``start_task``), chunk fields."""
    g = tl.graph
    kind = g.kind
    rows: list[tuple[str, int, int, str, int, int, int, int]] = []
    # (optype, stage, end_task, start_kind, start_task, mc, gmc, mb)
    fb = np.flatnonzero((kind == Kind.FWD) | (kind == Kind.BWD))
    for t in fb.tolist():
        opt = tr.FORWARD_COMPUTE if kind[t] == Kind.FWD else tr.BACKWARD_COMPUTE
        rows.append((opt, int(g.stage[t]), t, "start", t, int(g.chunk[t]), int(g.vstage[t]), int(g.mb[t])))
    for t in np.flatnonzero((kind == Kind.SEND_F) | (kind == Kind.SEND_B)).tolist():
        direction = "forward" if kind[t] == Kind.SEND_F else "backward"
        sp, rp = int(g.send_pred[t]), int(g.recv_pred[t])
        rows.append((f"{direction}-send", int(g.stage[t]), t, "end" if sp >= 0 else "start", sp if sp >= 0 else t,
                     -1, -1, -1))
        rows.append((f"{direction}-recv", int(g.peer[t]), t, "end" if rp >= 0 else "start", rp if rp >= 0 else t,
                     -1, -1, -1))
    p, v = g.pp, tl.job.parallelism.vpp
    if v > 1:  # Megatron records the sends and receives of the model's ends too, as no-ops
        pv = p * v
        for t in fb.tolist():
            vs, s = int(g.vstage[t]), int(g.stage[t])
            if kind[t] == Kind.FWD and vs == 0:
                rows.append((tr.FORWARD_RECV, s, t, "start", t, -2, -1, -1))
            if kind[t] == Kind.FWD and vs == pv - 1:
                rows.append((tr.FORWARD_SEND, s, t, "end", t, -3, -1, -1))
            if kind[t] == Kind.BWD and vs == pv - 1:
                rows.append((tr.BACKWARD_RECV, s, t, "start", t, -2, -1, -1))
            if kind[t] == Kind.BWD and vs == 0:
                rows.append((tr.BACKWARD_SEND, s, t, "end", t, -3, -1, -1))
    for code, opt in ((Kind.PARAM_AG, tr.PARAMS_ALL_GATHER), (Kind.GRAD_RS, tr.GRADS_REDUCE_SCATTER)):
        ids = np.flatnonzero(kind == code)
        if ids.size:
            frame = pd.DataFrame({"t": ids, "s": g.stage[ids], "c": g.chunk[ids]})
            for (s, c), grp in frame.groupby(["s", "c"], sort=True):
                members = grp["t"].to_numpy()
                rows.append((opt, as_int(s), int(members[-1]), "arrive", int(members[0]), as_int(c), -1, -1))
    for t in np.flatnonzero(kind == Kind.LN_AR).tolist():
        rows.append((tr.LAYERNORM_GRADS_ALL_REDUCE, int(g.stage[t]), t, "start", t, -1, -1, -1))
    for t in np.flatnonzero(kind == Kind.GRAD_WAIT).tolist():
        first_pred = int(g.pred_idx[g.pred_ptr[t]:g.pred_ptr[t + 1]][0])
        preds = g.pred_idx[g.pred_ptr[t]:g.pred_ptr[t + 1]]
        sync = [int(q) for q in preds if g.kind[q] in (Kind.LN_AR, Kind.EMB_AR)]
        rows.append((tr.SEPARATE_GRADS_ALL_REDUCE, int(g.stage[t]), t, "end", sync[0] if sync else first_pred,
                     -1, -1, -1))
    for code, opt in ((Kind.EMB_AR, tr.EMBEDDING_GRADS_ALL_REDUCE), (Kind.CLIP, tr.OPTIMIZER_CLIP_MAIN_GRAD)):
        for t in np.flatnonzero(kind == code).tolist():
            for q in g.pred_idx[g.pred_ptr[t]:g.pred_ptr[t + 1]].tolist():
                if kind[q] == Kind.ARRIVE:
                    rows.append((opt, int(g.stage[q]), t, "end", q, -1, -1, -1))
    for t in np.flatnonzero(kind == Kind.OPT).tolist():
        rows.append((tr.OPTIMIZER, int(g.stage[t]), t, "start", t, -1, -1, -1))
        last = np.flatnonzero((g.stage == g.stage[t]) & ((kind == Kind.FWD) | (kind == Kind.BWD)))
        rows.append((tr.GC, int(g.stage[t]), int(last[-1]) if last.size else t, "end",
                     int(last[-1]) if last.size else t, -1, -1, -1))
    df = pd.DataFrame(rows, columns=["optype", "stage", "end_task", "start_kind", "start_task", "mc", "gmc", "mb_id"])
    # no-op sends/receives at the model's ends last zero time at the action's start (-2) or end (-3)
    df["noop"] = df["mc"].map({-2: "start", -3: "end"}).fillna("")
    df.loc[df["noop"] != "", "mc"] = -1
    return df


def op_trace(tl: Timeline) -> pd.DataFrame:
    """The released-schema table of a timeline (not yet validated)."""
    if tl.job.pipeline.split_backward:
        raise TrainsimError("export_ops", f"the {tl.job.schedule} schedule splits off weight-gradient work, which "
                            "the released trace schema cannot represent",
                            "export a 1f1b, gpipe or interleaved run")
    ops = _unit_ops(tl)
    layout = tl.layout
    cls_of = tl.class_of_replica()
    frames = []
    end_t = ops["end_task"].to_numpy()
    start_t = ops["start_task"].to_numpy()
    sk = ops["start_kind"].to_numpy()
    noop = ops["noop"].to_numpy()
    stage = ops["stage"].to_numpy()
    for k in range(tl.steps):
        for d in range(layout.dp):
            col = tl.column(k, int(cls_of[d]))
            st, en, ar = tl.start[:, col], tl.end[:, col], tl.arrive[:, col]
            end = en[end_t]
            start = np.select([sk == "start", sk == "end", sk == "arrive"], [st[start_t], en[start_t], ar[start_t]])
            end = np.where(noop == "start", st[end_t], np.where(noop == "end", en[end_t], end))
            start = np.where(noop != "", end, start)
            start = np.minimum(start, end)
            frames.append(pd.DataFrame({
                "dp_rank": d, "stage": stage, "rank": np.asarray(layout.representative(d, stage)), "step": k,
                "optype": ops["optype"].to_numpy(), "start_ts": start, "duration": end - start,
                "mc": ops["mc"].to_numpy(), "gmc": ops["gmc"].to_numpy(), "mb_id": ops["mb_id"].to_numpy(),
            }))
    df = pd.concat(frames, ignore_index=True)
    df = df.sort_values(["step", "rank", "optype", "start_ts", "gmc", "mb_id"], kind="stable").reset_index(drop=True)
    df["seq_id"] = df.groupby(["step", "rank", "optype"], sort=False).cumcount()
    return df[list(tr.RELEASED_SCHEMA)]


def export_op_trace(tl: Timeline, trace_path: str | os.PathLike[str],
                    meta_path: str | os.PathLike[str] | None = None) -> tuple[Path, Path, int]:
    """Write ``trace_path`` (parquet) and its metadata (``meta_path``, default beside it as ``meta-<J>.yaml``)."""
    trace_p = Path(trace_path)
    meta_p = Path(meta_path) if meta_path is not None else tr.meta_path_beside(trace_p)
    name = _trial_name(meta_p, tl.job.model.name)
    df = op_trace(tl)
    tr.write_op_trace(df, trace_meta(tl, name), trace_p, meta_p)
    return trace_p, meta_p, len(df)
