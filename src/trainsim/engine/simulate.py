"""The event engine: build the graph, price every task for every replica class and step, and time it.

Durations come from the shared cost layer: compute actions from the templates of :mod:`trainsim.graph.blocks`
(scaled by the unit's slowdown, the micro-batch's sequence-length ratio and slow links), transfers and collectives from
the cost model's collectives. The graph is then timed (:mod:`trainsim.engine.evaluate`) and re-timed with the
durations that link sharing and the overlap slowdown imply (:mod:`trainsim.engine.contention`) until they agree: a
fixed point, reached in one round when nothing overlaps and usually in a few otherwise; from the fourth round on the
update is damped to avoid oscillation.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from trainsim.cost.job_costs import CostModel, default_cost_model
from trainsim.engine.contention import Interactions
from trainsim.engine.evaluate import Evaluator
from trainsim.engine.stragglers import Scenario, heterogeneity, scenario
from trainsim.engine.timeline import Timeline
from trainsim.errors import TrainsimError
from trainsim.graph.build import COMPUTE_KINDS, Graph, Kind, build_graph
from trainsim.parallel.axes import Group
from trainsim.parallel.layout import Layout

if TYPE_CHECKING:
    from trainsim.spec.job import Job

MAX_ITERATIONS = 24
TOLERANCE = 1e-6  # largest duration change, relative to the step time


def _template_arrays(g: Graph) -> dict[str, np.ndarray]:
    t = g.templates
    return {
        "compute": np.array([x.total.compute for x in t]),
        "quadratic": np.array([x.total.quadratic for x in t]),
        "exposed": np.array([sum(x.total.exposed.values()) for x in t]),
        "internode": np.array([x.total.internode for x in t]),
        "internode_exposed": np.array([x.total.internode_exposed for x in t]),
    }


def durations(g: Graph, sc: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[tasks, columns]`` durations before runtime interactions, and the in-block internode collective seconds
    (total and stalling) of compute tasks."""
    S, R = sc.steps, sc.num_classes
    V = S * R
    col_step = np.repeat(np.arange(S), R)
    col_cls = np.tile(np.arange(R), S)
    n = g.num_tasks
    base = np.zeros((n, V))
    inblock = np.zeros((n, V))
    inblock_exposed = np.zeros((n, V))
    kind = g.kind
    ta = _template_arrays(g)
    comp = np.flatnonzero(np.isin(kind, np.array(COMPUTE_KINDS, dtype=np.int8)))
    if comp.size:
        tm = g.tmpl[comp]
        rho = sc.seq[col_step[None, :], col_cls[None, :], g.mb[comp][:, None]]
        f = sc.compute[col_cls[None, :], g.stage[comp][:, None]]
        link = sc.unit_link[col_cls[None, :], g.stage[comp][:, None]]
        lin = (ta["compute"] - ta["quadratic"])[tm][:, None]
        quad = ta["quadratic"][tm][:, None]
        exp = ta["exposed"][tm][:, None]
        iexp = ta["internode_exposed"][tm][:, None]
        base[comp] = f * (lin * rho + quad * rho * rho) + (exp + iexp * (link - 1.0)) * rho
        inblock[comp] = ta["internode"][tm][:, None] * rho * link
        inblock_exposed[comp] = iexp * rho * link
    p2p = np.flatnonzero((kind == Kind.SEND_F) | (kind == Kind.SEND_B))
    if p2p.size:
        rho = sc.seq[col_step[None, :], col_cls[None, :], g.mb[p2p][:, None]]
        link_stage = np.where(kind[p2p] == Kind.SEND_F, g.stage[p2p], g.peer[p2p])
        link = sc.p2p_link[col_cls[None, :], link_stage[:, None]]
        base[p2p] = g.cost[p2p][:, None] * rho * link
    dp = np.flatnonzero((kind == Kind.PARAM_AG) | (kind == Kind.GRAD_RS))
    base[dp] = (g.cost[dp] * sc.dp_link[g.stage[dp]])[:, None]
    emb = np.flatnonzero(kind == Kind.EMB_AR)
    base[emb] = g.cost[emb][:, None] * sc.emb_link[col_cls][None, :]
    ln = np.flatnonzero(kind == Kind.LN_AR)
    tp_link = sc.unit_link if g.crosses[Group.TP] else np.ones_like(sc.unit_link)
    base[ln] = g.cost[ln][:, None] * tp_link[col_cls[None, :], g.stage[ln][:, None]]
    clip = np.flatnonzero(kind == Kind.CLIP)
    base[clip] = g.cost[clip][:, None]
    opt = np.flatnonzero(kind == Kind.OPT)
    base[opt] = g.cost[opt][:, None] * sc.compute[col_cls[None, :], g.stage[opt][:, None]]
    return base, inblock, inblock_exposed


def simulate(job: Job, cost_model: CostModel | None = None, *,
             slow_rank: Iterable[str] | Mapping[int, float] | None = None,
             slow_stage: Iterable[str] | Mapping[int, float] | None = None,
             slow_link: Iterable[str] | Mapping[int, float] | None = None,
             seq_len_cv: float = 0.0, seed: int = 0, steps: int = 1, link_sharing: bool = True,
             max_iterations: int = MAX_ITERATIONS, graph: Graph | None = None) -> Timeline:
    """Simulate ``steps`` training steps of ``job`` and return the :class:`Timeline`.

    Stragglers: see :mod:`trainsim.engine.stragglers`. ``link_sharing=False`` turns off bandwidth sharing between
    concurrent flows (the overlap slowdown stays, as set by the calibration's ``overlap_slowdown``).
    """
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
        raise TrainsimError("steps", f"must be a positive integer (got {steps!r})", "e.g. --steps 4")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
        raise TrainsimError("max_iterations", f"must be a positive integer (got {max_iterations!r})", "e.g. 12")
    t0 = time.perf_counter()
    model = cost_model or default_cost_model(job)
    layout = Layout.of(job)
    het = heterogeneity(layout, slow_rank, slow_stage, slow_link, seq_len_cv, seed)
    g = graph if graph is not None else build_graph(job, model)
    t_graph = time.perf_counter()
    sc = scenario(layout, het, job.num_microbatches, int(steps), g.crosses)
    base, inblock, inblock_exposed = durations(g, sc)
    ev = Evaluator(g, sc.steps, sc.num_classes)
    inter = Interactions(g, base, inblock, inblock_exposed, sc.steps, sc.num_classes,
                         model.calibration.overlap_slowdown, link_sharing)
    dur = base
    residual = 0.0
    iterations = 0
    overlap = np.zeros_like(base)
    inblock_extra = np.zeros_like(base)
    contended = overlapped = 0
    for iterations in range(1, max_iterations + 1):
        times = ev.run(dur)
        adj = inter(times.start, times.end, dur)
        residual = float(np.abs(adj.dur - dur).max()) if dur.size else 0.0
        overlap, inblock_extra = adj.overlap, adj.inblock
        contended, overlapped = adj.contended_flows, adj.overlapped_tasks
        scale = max(1.0, float(times.end.max()))
        if residual <= TOLERANCE * scale:
            break
        dur = adj.dur if iterations < 3 else 0.5 * (dur + adj.dur)
    else:
        times = ev.run(dur)
    # what the final timeline used (damping may leave dur between two proposals)
    extra = dur - base
    overlap = np.where(extra > 0, np.minimum(overlap, extra), 0.0)
    inblock_extra = np.clip(extra - overlap, 0.0, None) * (inblock_extra > 0)
    t_end = time.perf_counter()
    return Timeline(
        job=job, graph=g, layout=layout, scenario=sc, heterogeneity=het, start=times.start, end=times.end,
        arrive=times.arrive, base=base, overlap=overlap, inblock=inblock_extra, steps=int(steps),
        iterations=iterations, residual=residual, contended_flows=contended, overlapped_tasks=overlapped,
        info={"graph_s": t_graph - t0, "simulate_s": t_end - t_graph},
    )
