"""Where the time of a simulated step goes per unit: the breakdown of the analytic engine, and busy/idle per stage.

Every instant of a unit's step ``[0, T]`` (``T``: the end of the last optimizer step anywhere) is classified once:

* while its compute stream runs an action: ``compute`` (including the overlap slowdown) or the in-block collectives
  it stalls on (``tp_comm``, ``cp_comm``, ``ep_comm``; ZeRO-3 gathers: ``dp_comm``), in the proportions of the
  action's template; a first forward that waits for pipelined parameter all-gathers: ``dp_comm``; while it runs the
  optimizer: ``optimizer``;
* while it is idle: ``pp_comm`` when a pipeline transfer of the unit is in flight, else ``dp_comm`` when one of its
  data-parallel or gradient collectives runs, else ``optimizer`` after its own optimizer step (waiting for slower
  optimizers), else ``pipeline_bubble`` (waiting for other units: pipeline fill and drain, stragglers).

The reported breakdown is that of the **critical unit**: the busiest one (compute stream including the optimizer) of
the slowest replica class, as the analytic engine reports its critical stage; ``other`` is the calibration's
per-iteration overhead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainsim.engine.contention import covered, union_intervals
from trainsim.engine.timeline import Timeline
from trainsim.estimate import BREAKDOWN_KEYS
from trainsim.graph.build import COMPUTE_KINDS, Kind
from trainsim.parallel.axes import BREAKDOWN_KEY

STAGE_KEYS = ("busy_s", "idle_s", "compute_s", "comm_exposed_s", "optimizer_s", "pp_wait_s", "dp_wait_s",
              "optimizer_wait_s", "bubble_s")


def _preds(tl: Timeline, task: int) -> np.ndarray:
    g = tl.graph
    return g.pred_idx[g.pred_ptr[task]:g.pred_ptr[task + 1]]


class UnitAnalysis:
    """Classifies the time of every unit (stage) of one column."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        g = tl.graph
        self.g = g
        self.p = g.pp
        self.comp = np.flatnonzero(np.isin(g.kind, np.array(COMPUTE_KINDS, dtype=np.int8)))
        self.opt = g.ids(Kind.OPT)
        self.stream = np.concatenate((self.comp, self.opt))
        p2p = g.ids(Kind.SEND_F, Kind.SEND_B)
        self.pp_task = np.concatenate((p2p, p2p))
        self.pp_stage = np.concatenate((g.stage[p2p], g.peer[p2p]))
        # data-parallel and gradient collectives of each member: (task, stage)
        rows_t: list[int] = []
        rows_s: list[int] = []
        for t in g.ids(Kind.PARAM_AG, Kind.GRAD_RS, Kind.LN_AR, Kind.GRAD_WAIT).tolist():
            rows_t.append(t)
            rows_s.append(int(g.stage[t]))
        for t in g.ids(Kind.EMB_AR, Kind.CLIP).tolist():
            for q in _preds(tl, t).tolist():
                if g.kind[q] == Kind.ARRIVE:
                    rows_t.append(t)
                    rows_s.append(int(g.stage[q]))
        self.dp_task = np.asarray(rows_t, dtype=np.int64)
        self.dp_stage = np.asarray(rows_s, dtype=np.int64)
        # template shares of the exposed in-block communication
        keys = sorted({k for t in g.templates for k in t.total.exposed})
        self.groups = keys
        self.tmpl_exposed = np.array([[t.total.exposed.get(k, 0.0) for k in keys] for t in g.templates]).reshape(
            len(g.templates), len(keys))

    def column(self, col: int, step_end: float) -> dict[str, np.ndarray]:
        """Per-stage seconds of every category in column ``col`` (arrays of length pp)."""
        tl, g, p = self.tl, self.g, self.p
        start, end = tl.start[:, col], tl.end[:, col]
        span = step_end + 1.0
        out: dict[str, np.ndarray] = {}
        # compute-stream tasks
        comp = self.comp
        dur = end[comp] - start[comp]
        tm = g.tmpl[comp]
        exp_nom = self.tmpl_exposed[tm]  # nominal exposed per group
        nominal_total = exp_nom.sum(axis=1)
        ta_exp = np.array([sum(t.total.exposed.values()) for t in g.templates])[tm]
        ta_iexp = np.array([t.total.internode_exposed for t in g.templates])[tm]
        # the exposed part of the base duration (see engine.simulate.durations), plus link-sharing stalls
        sc = tl.scenario
        cls = col % tl.classes
        step = col // tl.classes
        rho = sc.seq[step, cls, g.mb[comp]]
        link = sc.unit_link[cls, g.stage[comp]]
        comm_part = (ta_exp + ta_iexp * (link - 1.0)) * rho + tl.inblock[comp, col]
        # a forward pipelined with the parameter all-gather may end later than its own duration: that stall is
        # data-parallel communication
        own = np.minimum(tl.base[comp, col] + tl.overlap[comp, col] + tl.inblock[comp, col], dur)
        stall = dur - own
        comm_part = np.minimum(comm_part, own)
        compute_part = own - comm_part
        share = np.divide(exp_nom, nominal_total[:, None], out=np.zeros_like(exp_nom),
                          where=nominal_total[:, None] > 0)
        st = g.stage[comp]
        out["compute_s"] = np.bincount(st, weights=compute_part, minlength=p)
        for j, key in enumerate(self.groups):
            out[f"comm:{key}"] = np.bincount(st, weights=comm_part * share[:, j], minlength=p)
        out["comm:param_gather"] = np.bincount(st, weights=stall, minlength=p)
        out["comm_exposed_s"] = np.bincount(st, weights=comm_part + stall, minlength=p)
        opt = self.opt
        out["optimizer_s"] = np.bincount(g.stage[opt], weights=end[opt] - start[opt], minlength=p)
        busy = out["compute_s"] + out["comm_exposed_s"] + out["optimizer_s"]
        out["busy_s"] = busy
        out["idle_s"] = step_end - busy
        # idle time covered by communication of the unit
        s_ids = self.stream
        s_grp, s_a, s_b = g.stage[s_ids], start[s_ids], end[s_ids]
        stages = np.arange(p)

        def idle_cover(grp: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            us, ue = union_intervals(grp, a, b, span)
            total = covered(us, ue, stages, np.zeros(p), np.full(p, step_end), span)
            inside = np.bincount(s_grp, weights=covered(us, ue, s_grp, s_a, s_b, span), minlength=p)
            return np.maximum(total - inside, 0.0)

        pp_a, pp_b = start[self.pp_task], end[self.pp_task]
        dp_a = start[self.dp_task]
        dp_b = end[self.dp_task]
        tail_a = end[opt]
        pp_cov = idle_cover(self.pp_stage, pp_a, pp_b)
        ppdp_cov = idle_cover(np.concatenate((self.pp_stage, self.dp_stage)), np.concatenate((pp_a, dp_a)),
                              np.concatenate((pp_b, dp_b)))
        all_cov = idle_cover(np.concatenate((self.pp_stage, self.dp_stage, g.stage[opt])),
                             np.concatenate((pp_a, dp_a, tail_a)),
                             np.concatenate((pp_b, dp_b, np.full(opt.size, step_end))))
        out["pp_wait_s"] = pp_cov
        out["dp_wait_s"] = np.maximum(ppdp_cov - pp_cov, 0.0)
        out["optimizer_wait_s"] = np.maximum(all_cov - ppdp_cov, 0.0)
        out["bubble_s"] = np.maximum(out["idle_s"] - all_cov, 0.0)
        return out


def analyse(tl: Timeline) -> tuple[dict[str, float], list[float], int, dict[str, Any]]:
    """Breakdown (without ``other``), per-stage busy time, critical stage and per-stage busy/idle of a timeline."""
    ua = UnitAnalysis(tl)
    p, R = tl.graph.pp, tl.classes
    ends = tl.step_end()
    keys = [k for k in BREAKDOWN_KEYS if k != "other"]
    acc = dict.fromkeys(keys, 0.0)
    busy_max = np.zeros(p)
    stage_rows = {k: np.zeros(p) for k in STAGE_KEYS}
    crit_stage = crit_cls = 0
    for k in range(tl.sim_steps):
        T = float(ends[k])
        per_cls = [ua.column(tl.column(k, c), T) for c in range(R)]
        busy = np.array([x["busy_s"] for x in per_cls])  # [class, stage]
        busy_max += busy.max(axis=0)
        c, s = np.unravel_index(int(np.argmax(busy)), busy.shape)
        x = per_cls[int(c)]
        if k == 0:
            crit_stage, crit_cls = int(s), int(c)
        acc["compute"] += float(x["compute_s"][s])
        for gk in ua.groups:  # every group's stall under its breakdown entry (expert-TP under tp_comm)
            acc[BREAKDOWN_KEY[gk]] += float(x[f"comm:{gk}"][s])
        acc["dp_comm"] += float(x["comm:param_gather"][s])
        acc["pp_comm"] += float(x["pp_wait_s"][s])
        acc["dp_comm"] += float(x["dp_wait_s"][s])
        acc["optimizer"] += float(x["optimizer_s"][s] + x["optimizer_wait_s"][s])
        acc["pipeline_bubble"] += float(x["bubble_s"][s])
        for key in STAGE_KEYS:
            stage_rows[key] += x[key]
    n = tl.sim_steps
    breakdown = {key: acc[key] / n for key in keys}
    per_stage = [{"stage": s, **{key: float(stage_rows[key][s] / n) for key in STAGE_KEYS}} for s in range(p)]
    detail = {"stage_busy_idle": per_stage, "critical_class": crit_cls}
    return breakdown, (busy_max / n).tolist(), crit_stage, detail
