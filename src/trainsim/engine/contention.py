"""Runtime interactions the static graph cannot know: link sharing and compute slowed by overlapping communication.

Both depend on what runs at the same time, so the engine re-times the graph until the durations they imply agree with
the timeline they produce (a fixed point; see :mod:`trainsim.engine.simulate`).

* **Link sharing.** Every unit has an outgoing and an incoming side on its NICs (transfers that leave the node) and
  on NVLink. Pipeline transfers (sender out, receiver in), data-parallel collectives and the tied-embedding
  all-reduce (both sides of every member) are flows on those links. Flows that overlap in time on one link share it
  equally (processor sharing); the in-block collectives of a compute task that leave the node take their share
  while they run, as a background load equal to the task's internode-communication utilisation. A flow's duration is
  that of its most contended link; a collective of several replicas ends when its slowest member does. In-block
  collectives are slowed in turn by the explicit flows that overlap them (their stall part grows accordingly).
* **Overlap slowdown** (Proteus' overlap factor). A compute task progresses ``1 + overlap_slowdown`` times slower
  while any communication of its unit (transfers it sends or receives, its data-parallel and gradient collectives)
  runs: ``duration = work + ov·k/(1 + k)`` for ``ov`` seconds of overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainsim.graph.build import COMPUTE_KINDS, DP_KINDS, Graph, Kind

_NONE = np.empty(0)  # an empty float array (never written)


def _offsets(group: np.ndarray, span: float) -> np.ndarray:
    return group.astype(np.float64) * span


def union_intervals(group: np.ndarray, a: np.ndarray, b: np.ndarray, span: float) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals ``[a, b)`` within each group, on a line where group ``g`` is shifted by ``g·span``."""
    keep = b > a
    off = _offsets(group[keep], span)
    s = a[keep] + off
    e = b[keep] + off
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run[:-1]
    starts = s[new]
    idx = np.flatnonzero(new)
    ends = run[np.append(idx[1:] - 1, s.size - 1)]
    return starts, ends


def covered(us: np.ndarray, ue: np.ndarray, group: np.ndarray, a: np.ndarray, b: np.ndarray,
            span: float) -> np.ndarray:
    """Length of ``[a, b)`` (in group ``group``) covered by the union ``us, ue`` of :func:`union_intervals`."""
    if us.size == 0:
        return np.zeros(np.broadcast(a, b).shape)
    off = _offsets(group, span)
    cum = np.concatenate(([0.0], np.cumsum(ue - us)))

    def cover_to(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(us, t, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.clip(t - us[kk], 0.0, ue[kk] - us[kk])
        return np.where(k >= 0, cum[kk] + inside, 0.0)

    return np.maximum(cover_to(b + off) - cover_to(a + off), 0.0)


def processor_sharing(arrival: np.ndarray, demand: np.ndarray, cap_t: np.ndarray | None = None,
                      cap_v: np.ndarray | None = None) -> np.ndarray:
    """Completion times of flows sharing one link equally.

    ``demand``: seconds each flow needs alone; ``cap_t``/``cap_v``: breakpoints and values of the capacity left to
    these flows (1 = the whole link; piecewise constant, 1 before the first breakpoint).
    """
    n = arrival.size
    done = np.full(n, np.nan)
    order = np.argsort(arrival, kind="stable")
    remaining = demand.astype(np.float64).copy()
    active: list[int] = []
    t = float(arrival[order[0]]) if n else 0.0
    nxt = 0
    cts = cap_t.tolist() if cap_t is not None else []
    cvs = cap_v.tolist() if cap_v is not None else []
    ci = 0

    def capacity(at: float) -> float:
        nonlocal ci
        while ci < len(cts) and cts[ci] <= at:
            ci += 1
        return cvs[ci - 1] if ci > 0 else 1.0

    while nxt < n or active:
        while nxt < n and arrival[order[nxt]] <= t:
            i = int(order[nxt])
            if remaining[i] <= 0:
                done[i] = max(t, float(arrival[i]))
            else:
                active.append(i)
            nxt += 1
        if not active:
            t = float(arrival[order[nxt]])
            continue
        cap = max(capacity(t), 1e-6)
        rate = cap / len(active)
        r_min = min(remaining[i] for i in active)
        t_finish = t + r_min / rate
        t_next = t_finish
        if nxt < n:
            t_next = min(t_next, float(arrival[order[nxt]]))
        if ci < len(cts):
            t_next = min(t_next, cts[ci])
        completes = t_next >= t_finish
        step = r_min if completes else (t_next - t) * rate
        still = []
        for i in active:
            remaining[i] -= step
            if completes and remaining[i] <= 1e-12 * demand[i]:
                done[i] = t_finish
            else:
                still.append(i)
        active = still
        t = t_finish if completes else t_next
    return done


@dataclass
class Adjustment:
    """Durations implied by one timeline: ``dur = base + overlap + inblock`` for compute tasks (``overlap``: the
    overlap slowdown, ``inblock``: in-block collectives slowed by shared links); shared-link durations for flows."""

    dur: np.ndarray
    overlap: np.ndarray
    inblock: np.ndarray
    contended_flows: int
    overlapped_tasks: int


def _comm_intervals(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(task, stage) rows of communication that loads a unit (transfers at both ends, DP and gradient collectives)."""
    kinds = g.kind
    rows_t: list[np.ndarray] = []
    rows_s: list[np.ndarray] = []
    p2p = np.flatnonzero((kinds == Kind.SEND_F) | (kinds == Kind.SEND_B))
    rows_t += [p2p, p2p]
    rows_s += [g.stage[p2p], g.peer[p2p]]
    coll = np.flatnonzero(np.isin(kinds, np.array([Kind.PARAM_AG, Kind.GRAD_RS, Kind.LN_AR], dtype=np.int8)))
    rows_t.append(coll)
    rows_s.append(g.stage[coll])
    emb = np.flatnonzero(kinds == Kind.EMB_AR)
    rows_t += [emb, emb]
    rows_s += [g.stage[emb], g.peer[emb]]
    return np.concatenate(rows_t), np.concatenate(rows_s)


class Interactions:
    """Computes the durations implied by a timeline (link sharing and overlap slowdown)."""

    def __init__(self, g: Graph, base: np.ndarray, inblock: np.ndarray, inblock_exposed: np.ndarray,
                 steps: int, replicas: int, overlap_slowdown: float, sharing: bool = True) -> None:
        self.g = g
        self.base = base
        self.inblock = inblock  # [tasks, cols] internode in-block comm seconds of compute tasks
        self.inblock_exposed = inblock_exposed
        self.S, self.R = steps, replicas
        self.k = overlap_slowdown
        self.sharing = sharing
        self.comp = g.ids(*COMPUTE_KINDS)
        self.comm_task, self.comm_stage = _comm_intervals(g)
        f = g.flows
        self.flow_task, self.flow_stage = f["task"], f["stage"]
        self.flow_dir, self.flow_inter = f["dir"], f["internode"]
        self.flow_compute = np.isin(g.kind[self.flow_task], np.array(COMPUTE_KINDS, dtype=np.int8))
        self.sync_dp = np.isin(g.kind, np.array(DP_KINDS, dtype=np.int8)) & g.sync

    def __call__(self, start: np.ndarray, end: np.ndarray, dur: np.ndarray) -> Adjustment:
        new = self.base.copy()
        overlap = np.zeros_like(new)
        inblock = np.zeros_like(new)
        contended = self._sharing(start, end, new, inblock) if self.sharing else 0
        overlapped = self._slowdown(start, end, dur, overlap)
        return Adjustment(new + overlap + inblock, overlap, inblock, contended, overlapped)

    # ---- overlap slowdown -------------------------------------------------------------------------------------
    def _slowdown(self, start: np.ndarray, end: np.ndarray, dur: np.ndarray, out: np.ndarray) -> int:
        if self.k <= 0 or self.comm_task.size == 0 or self.comp.size == 0:
            return 0
        g = self.g
        cols = start.shape[1]
        span = float(end.max()) + 1.0
        ct, cs = self.comm_task, self.comm_stage
        col = np.broadcast_to(np.arange(cols), (ct.size, cols))
        grp = (cs[:, None] * cols + col).ravel()
        us, ue = union_intervals(grp, start[ct].ravel(), end[ct].ravel(), span)
        comp = self.comp
        grp_c = (g.stage[comp][:, None] * cols + np.arange(cols)).ravel()
        a = start[comp].ravel()
        b = a + dur[comp].ravel()
        ov = covered(us, ue, grp_c, a, b, span).reshape(comp.size, cols)
        out[comp] = ov * (self.k / (1.0 + self.k))
        return int((ov > 0).sum())

    # ---- link sharing -----------------------------------------------------------------------------------------
    def _sharing(self, start: np.ndarray, end: np.ndarray, new: np.ndarray, inblock: np.ndarray) -> int:
        if self.flow_task.size == 0:
            return 0
        cols = start.shape[1]
        span = float(end.max()) + 1.0
        ft, fs, fd, fi, fc = self.flow_task, self.flow_stage, self.flow_dir, self.flow_inter, self.flow_compute
        res = (fs * 2 + fd) * 2 + fi.astype(np.int64)  # (stage, direction, nic or nvlink)
        rows = np.flatnonzero(~fc)
        if rows.size == 0:
            return 0
        cidx = np.arange(cols)
        grp = (res[rows][:, None] * cols + cidx).ravel()
        a = start[ft[rows]].ravel()
        b = end[ft[rows]].ravel()
        demand = self.base[ft[rows]].ravel()
        # clusters: maximal runs of flows that overlap in time on one link of one column
        order = np.lexsort((a, grp))
        gs, as_, bs = grp[order], a[order], b[order]
        newgrp = np.r_[True, gs[1:] != gs[:-1]]
        seg = np.cumsum(newgrp) - 1
        big = span * 4
        run_end = np.maximum.accumulate(bs + seg * big) - seg * big  # running max of ends within a link
        prev_end = np.r_[-np.inf, run_end[:-1]]
        eps = 1e-12 * (1.0 + np.abs(as_))
        new_cluster = newgrp | (as_ >= prev_end - eps)
        cid = np.cumsum(new_cluster) - 1
        size = np.bincount(cid)
        # flows that meet in-block traffic of a compute task (background load)
        bg_rows = np.flatnonzero(fc)
        bg_hit = np.zeros(len(size), dtype=bool)
        bgrp = ba = bb = _NONE  # group, start and end of each background interval (set when there are some)
        if bg_rows.size:
            bgrp = (res[bg_rows][:, None] * cols + cidx).ravel()
            ba = start[ft[bg_rows]].ravel()
            bb = end[ft[bg_rows]].ravel()
            bu, be = union_intervals(bgrp, ba, bb, span)
            hit = covered(bu, be, gs, as_, bs, span) > 0
            bg_hit = np.bincount(cid, weights=hit.astype(float), minlength=len(size)) > 0
        busy = (size > 1) | bg_hit
        if not busy.any():
            return 0
        fin = as_ + demand[order]
        first = np.flatnonzero(new_cluster)
        cmin = np.minimum.reduceat(as_, first)
        cmax = np.maximum.reduceat(as_, first)
        together = busy & ~bg_hit & (cmax - cmin <= 1e-12 * (1.0 + np.abs(cmin)))
        # flows of one cluster that start together: closed form of processor sharing
        sel = np.flatnonzero(together[cid])
        if sel.size:
            d = demand[order][sel]
            c = cid[sel]
            o = np.lexsort((d, c))
            sel, d, c = sel[o], d[o], c[o]
            n = size[c]
            lead = np.r_[True, c[1:] != c[:-1]]
            pos = np.arange(sel.size) - np.maximum.accumulate(np.where(lead, np.arange(sel.size), 0))
            csum = np.cumsum(d)
            base_sum = np.maximum.accumulate(np.where(lead, csum - d, 0.0))
            excl = csum - d - base_sum
            fin[sel] = as_[sel] + excl + (n - pos) * d
        # the rest: event-driven processor sharing, cluster by cluster
        bg_by_group: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if bg_rows.size and bg_hit.any():
            util = np.clip(self.inblock[ft[bg_rows]].ravel() / np.maximum(bb - ba, 1e-15), 0.0, 1.0)
            wanted = np.unique(gs[bg_hit[cid]])
            keep = np.isin(bgrp, wanted)
            ko = np.lexsort((ba[keep], bgrp[keep]))
            kg, ka, kb, ku = bgrp[keep][ko], ba[keep][ko], bb[keep][ko], util[keep][ko]
            keys, idx0 = np.unique(kg, return_index=True)
            idx1 = np.append(idx0[1:], kg.size)
            for key, lo, hi in zip(keys.tolist(), idx0.tolist(), idx1.tolist(), strict=True):
                bg_by_group[key] = (ka[lo:hi], kb[lo:hi], ku[lo:hi])
        slow = np.flatnonzero(busy & ~together)
        bounds = np.append(first, as_.size)
        dem_sorted = demand[order]
        for cl in slow.tolist():
            lo, hi = bounds[cl], bounds[cl + 1]
            cap_t = cap_v = None
            bg = bg_by_group.get(int(gs[lo]))
            if bg is not None:
                s0, e0, u = bg
                w = e0 > as_[lo]
                s0, e0, u = s0[w], e0[w], u[w]
                cap_t = np.empty(2 * s0.size)
                cap_v = np.empty(2 * s0.size)
                cap_t[0::2], cap_t[1::2] = s0, e0
                # while in-block traffic with utilisation u runs, explicit flows keep 1 - u/2 of the link
                cap_v[0::2], cap_v[1::2] = 1.0 - u / 2.0, 1.0
            fin[lo:hi] = processor_sharing(as_[lo:hi], dem_sorted[lo:hi], cap_t, cap_v)
        eff_sorted = np.maximum(fin - as_, dem_sorted)
        eff = np.empty_like(eff_sorted)
        eff[order] = eff_sorted
        contended = int((eff > demand * (1 + 1e-9)).sum())
        if contended == 0:
            return 0
        eff_m = eff.reshape(rows.size, cols)
        # a flow lasts as long as on its most contended link
        tasks = ft[rows]
        upd = np.zeros_like(new)
        np.maximum.at(upd, tasks, eff_m)
        touched = np.unique(tasks)
        # collectives of all replicas end together
        sync = touched[self.sync_dp[touched]]
        if sync.size:
            sub = upd[sync].reshape(sync.size, self.S, self.R)
            upd[sync] = np.broadcast_to(sub.max(axis=2, keepdims=True), sub.shape).reshape(sync.size, cols)
        new[touched] = np.maximum(new[touched], upd[touched])
        # in-block collectives slowed by explicit flows: their stall grows with the overlapped fraction
        if bg_rows.size and self.inblock_exposed.any():
            eu, ee = union_intervals(grp, a, a + eff, span)
            comp_tasks = ft[bg_rows]
            frac = covered(eu, ee, bgrp, ba, bb, span) / np.maximum(bb - ba, 1e-15)
            extra = frac.reshape(bg_rows.size, cols) * self.inblock_exposed[comp_tasks]
            np.maximum.at(inblock, comp_tasks, extra)
        return contended
