"""Chrome / Perfetto trace of a simulated run (written by :func:`trainsim.io.chrome.write_chrome_trace`).

One process per representative GPU: a pipeline stage of a replica class (TP rank 0 / CP rank 0 of its group; the
process name lists the data-parallel replicas it stands for and its TP×CP group). One thread per stream:
compute, TP/CP/EP comm, DP comm, grad sync, and pipeline forward/backward send and receive. Complete events
(``ph: "X"``) in microseconds, steps one after the other. Arguments carry the stage, micro-batch, model chunk
(``chunk``, local; ``virtual_stage``, global), the layers of the chunk and the bytes moved.

Detail ``block``: one slice per action (forward/backward of one micro-batch on one chunk). Detail ``layer``: every
operator of every layer (compute ops on the compute stream, the layer's collectives on the TP/CP/EP stream,
ZeRO-3 gathers on the DP stream), stretched to the action's simulated duration. ``auto`` picks ``layer`` when the
trace stays under :data:`MAX_AUTO_LAYER_EVENTS` events.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from trainsim.engine.timeline import STREAM_ID, STREAMS, Timeline
from trainsim.errors import TrainsimError
from trainsim.graph.build import COMPUTE_KINDS, Kind
from trainsim.io.chrome import ChromeTraceInfo, write_chrome_trace
from trainsim.workload.stages import chunk_layer_indices

MAX_AUTO_LAYER_EVENTS = 200_000
DETAILS = ("auto", "block", "layer")


def ranges(values: list[int] | tuple[int, ...]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    vals = sorted(set(int(v) for v in values))
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        parts.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(parts)


def _step_offsets(tl: Timeline) -> np.ndarray:
    times = tl.step_times()
    return np.concatenate(([0.0], np.cumsum(times)[:-1]))


def _layer_events(tl: Timeline) -> int:
    g = tl.graph
    comp = np.flatnonzero(np.isin(g.kind, np.array(COMPUTE_KINDS, dtype=np.int8)))
    per_tmpl = np.array([sum(len(s.block.slices) * s.count for s in t.segments) + len(t.dp_slices)
                         for t in g.templates])
    return int(per_tmpl[g.tmpl[comp]].sum()) * tl.classes * tl.steps


def _frame(**cols: Any) -> pd.DataFrame:
    return pd.DataFrame(cols)


def trace_events(tl: Timeline, detail: str = "auto") -> tuple[pd.DataFrame, dict[int, str], dict[int, int], str]:
    """The slices of a timeline, the process names and sort order, and the detail used."""
    if detail not in DETAILS:
        raise TrainsimError("trace_detail", f"unknown detail {detail!r}", f"use one of {', '.join(DETAILS)}")
    if detail == "auto":
        detail = "layer" if _layer_events(tl) <= MAX_AUTO_LAYER_EVENTS else "block"
    g, job = tl.graph, tl.job
    p, R = g.pp, tl.classes
    offsets = _step_offsets(tl)
    frames: list[pd.DataFrame] = []
    layer_names = {}
    for s in range(p):
        for c in range(job.parallelism.vpp):
            idx = chunk_layer_indices(job, s, c)
            layer_names[(s, c)] = f"{idx.start}-{idx.stop - 1}" if len(idx) else ""
    kind = g.kind
    comp = np.flatnonzero(np.isin(kind, np.array(COMPUTE_KINDS, dtype=np.int8)))
    opt = np.flatnonzero(kind == Kind.OPT)
    p2p = np.flatnonzero((kind == Kind.SEND_F) | (kind == Kind.SEND_B))
    dp = np.flatnonzero((kind == Kind.PARAM_AG) | (kind == Kind.GRAD_RS))
    grad_kind = "reduce-scatter" if (job.training.zero_stage or 0) >= 1 else "all-reduce"  # resolved by the Job
    letter = {Kind.FWD: "F", Kind.BWD: "B", Kind.WGT: "W"}
    sc = tl.scenario
    for k in range(tl.steps):
        for cls in range(R):
            col = tl.column(k, cls)
            off = offsets[k]
            pid_base = cls * p
            st, en = tl.start[:, col] + off, tl.end[:, col] + off
            common = {"step": k}
            # compute actions
            if detail == "block":
                names = [f"{letter[Kind(kd)]} mb{b}" + (f" c{ch}" if job.parallelism.vpp > 1 else "")
                         for kd, b, ch in zip(kind[comp], g.mb[comp], g.chunk[comp], strict=True)]
                rho = sc.seq[k % tl.sim_steps, cls, g.mb[comp]]
                nb = np.array([t.total.nbytes for t in g.templates])[g.tmpl[comp]] * rho
                frames.append(_frame(
                    pid=pid_base + g.stage[comp], tid=STREAM_ID["compute"], name=names, ts_s=st[comp],
                    dur_s=en[comp] - st[comp], cat="compute", stage=g.stage[comp], microbatch=g.mb[comp],
                    chunk=g.chunk[comp], virtual_stage=g.vstage[comp],
                    layers=[layer_names[(int(a), int(b))] for a, b in zip(g.stage[comp], g.chunk[comp], strict=True)],
                    bytes=nb, **common))
            else:
                frames.append(_layer_frames(tl, comp, st, en, pid_base, k, layer_names))
            frames.append(_frame(pid=pid_base + g.stage[opt], tid=STREAM_ID["compute"], name="optimizer",
                                 ts_s=st[opt], dur_s=en[opt] - st[opt], cat="optimizer", stage=g.stage[opt],
                                 **common))
            # pipeline transfers, on both ends
            if p2p.size:
                fwd = kind[p2p] == Kind.SEND_F
                what = np.where(fwd, "activation", "gradient")
                for side, stage_arr, arrow in (("send", g.stage[p2p], "→"), ("recv", g.peer[p2p], "←")):
                    other = g.peer[p2p] if side == "send" else g.stage[p2p]
                    tid = np.where(fwd, STREAM_ID[f"pp fwd {side}"], STREAM_ID[f"pp bwd {side}"])
                    names = [f"{side} {w} mb{b} {arrow} stage {o}" for w, b, o in zip(what, g.mb[p2p], other,
                                                                                       strict=True)]
                    frames.append(_frame(
                        pid=pid_base + stage_arr, tid=tid, name=names, ts_s=st[p2p], dur_s=en[p2p] - st[p2p],
                        cat="pp comm", stage=stage_arr, peer_stage=other, microbatch=g.mb[p2p],
                        virtual_stage=g.vstage[p2p], bytes=g.nbytes[p2p] * sc.seq[k % tl.sim_steps, cls, g.mb[p2p]],
                        **common))
            if dp.size:
                names = [(f"param all-gather c{c} b{b}" if kd == Kind.PARAM_AG else f"grad {grad_kind} c{c} b{b}")
                         for kd, c, b in zip(kind[dp], g.chunk[dp], g.bucket[dp], strict=True)]
                frames.append(_frame(pid=pid_base + g.stage[dp], tid=STREAM_ID["dp comm"], name=names,
                                     ts_s=st[dp], dur_s=en[dp] - st[dp], cat="dp comm", stage=g.stage[dp],
                                     chunk=g.chunk[dp], bucket=g.bucket[dp], bytes=g.nbytes[dp], **common))
            # gradient tail
            rows = []
            for t in np.flatnonzero(np.isin(kind, np.array([Kind.LN_AR, Kind.GRAD_WAIT], np.int8))).tolist():
                rows.append((int(g.stage[t]), t, "layernorm-grad all-reduce" if kind[t] == Kind.LN_AR
                             else "wait for grad buckets"))
            for t in np.flatnonzero(kind == Kind.EMB_AR).tolist():
                rows += [(int(g.stage[t]), t, "embedding-grad all-reduce"), (int(g.peer[t]), t,
                                                                            "embedding-grad all-reduce")]
            for t in np.flatnonzero(kind == Kind.CLIP).tolist():
                rows += [(s, t, "grad-norm all-reduce") for s in range(p)]
            if rows:
                rs = np.array([r[0] for r in rows])
                rt = np.array([r[1] for r in rows])
                frames.append(_frame(pid=pid_base + rs, tid=STREAM_ID["grad sync"], name=[r[2] for r in rows],
                                     ts_s=st[rt], dur_s=en[rt] - st[rt], cat="grad sync", stage=rs, **common))
    events = pd.concat(frames, ignore_index=True)
    events = events[events["dur_s"] > 0].reset_index(drop=True)
    for col in ("stage", "microbatch", "chunk", "virtual_stage", "bucket", "peer_stage", "step"):
        if col in events.columns:  # integers (missing where an event has no such argument)
            values = events[col].to_numpy(dtype=float)
            events[col] = pd.Series([None if v != v else int(v) for v in values.tolist()], dtype=object)
    names, order = {}, {}
    tp, cp = job.parallelism.tp, job.parallelism.cp
    group = f"TP×CP group of {tp * cp} GPUs" if tp * cp > 1 else "1 GPU"
    for cls in range(R):
        reps = tl.replicas_of(cls)
        first = reps[0]
        who = (f"all {len(reps)} DP replicas" if len(reps) == job.dp and job.dp > 1
               else f"DP replica{'s' if len(reps) > 1 else ''} {ranges(reps)}")
        for s in range(p):
            rank = int(tl.layout.representative(first, s))
            names[cls * p + s] = f"stage {s} · {who} · rank {rank} ({group})"
            order[cls * p + s] = cls * p + s
    return events, names, order, detail


def _layer_frames(tl: Timeline, comp: np.ndarray, st: np.ndarray, en: np.ndarray, pid_base: int, step: int,
                  layer_names: dict[tuple[int, int], str]) -> pd.DataFrame:
    g, job = tl.graph, tl.job
    rows: dict[str, list[Any]] = {k: [] for k in ("pid", "tid", "name", "ts_s", "dur_s", "cat", "stage",
                                                  "microbatch", "chunk", "layer", "group", "bytes")}
    backward = {Kind.BWD, Kind.WGT}
    for t in comp.tolist():
        tmpl = g.templates[int(g.tmpl[t])]
        s, c, b = int(g.stage[t]), int(g.chunk[t]), int(g.mb[t])
        t0, t1 = float(st[t]), float(en[t])
        scale = (t1 - t0) / tmpl.duration if tmpl.duration > 0 else 0.0
        layers = list(chunk_layer_indices(job, s, c))
        if Kind(g.kind[t]) in backward:
            layers = layers[::-1]
        pos = 0
        li = 0
        for seg in tmpl.segments:
            for _ in range(seg.count):
                base = tmpl.layer_offsets[pos]
                if seg.label in ("layer", "moe layer"):
                    label = layers[li] if li < len(layers) else -1
                    li += 1
                else:
                    label = -1
                for sl in seg.block.slices:
                    tid = STREAM_ID[{"compute": "compute", "ep": "ep dispatch/combine"}.get(sl.stream, "tp/cp comm")]
                    rows["pid"].append(pid_base + s)
                    rows["tid"].append(tid)
                    rows["name"].append(sl.name if label < 0 else f"{sl.name} L{label}")
                    rows["ts_s"].append(t0 + (base + sl.start) * scale)
                    rows["dur_s"].append((sl.end - sl.start) * scale)
                    rows["cat"].append("compute" if sl.stream == "compute" else f"{sl.group} comm")
                    rows["stage"].append(s)
                    rows["microbatch"].append(b)
                    rows["chunk"].append(c)
                    rows["layer"].append(seg.label if label < 0 else label)
                    rows["group"].append(sl.group or None)
                    rows["bytes"].append(sl.nbytes or None)
                pos += 1
        for sl in tmpl.dp_slices:
            rows["pid"].append(pid_base + s)
            rows["tid"].append(STREAM_ID["dp comm"])
            rows["name"].append(sl.name)
            rows["ts_s"].append(t0 + sl.start * scale)
            rows["dur_s"].append((sl.end - sl.start) * scale)
            rows["cat"].append("dp comm")
            rows["stage"].append(s)
            rows["microbatch"].append(b)
            rows["chunk"].append(c)
            rows["layer"].append(None)
            rows["group"].append("dp")
            rows["bytes"].append(None)
    df = pd.DataFrame(rows)
    df["step"] = step
    df["layer"] = df["layer"].astype(object)
    return df


def write_trace(tl: Timeline, path: str | os.PathLike[str], detail: str = "auto",
                overlap: str = "lanes") -> tuple[ChromeTraceInfo, str]:
    """Write the Chrome/Perfetto trace of a timeline; returns what was written and the detail used."""
    events, names, order, used = trace_events(tl, detail)
    job = tl.job
    par = job.parallelism
    meta = {
        "generator": "trainsim event engine",
        "model": job.model.name,
        "system": job.system.name,
        "num_gpus": job.world_size,
        "parallelism": f"tp {par.tp} pp {par.pp} vpp {par.vpp} cp {par.cp} ep {par.ep} dp {job.dp}",
        "schedule": job.schedule,
        "micro_batches": job.num_microbatches,
        "steps": tl.steps,
        "replica_classes": tl.classes,
        "detail": used,
        "iteration_time_s": float(np.mean(tl.step_times())),
    }
    threads = {i + 1: name for i, name in enumerate(STREAMS)}
    info = write_chrome_trace(events, path, process_names=names, thread_names=threads, process_sort_index=order,
                              overlap=overlap, tolerance_s=1e-9, metadata=meta)  # type: ignore[arg-type]
    return info, used
