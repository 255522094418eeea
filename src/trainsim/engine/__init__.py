"""The event-driven simulator: per-GPU timelines of a training step (``trainsim predict --engine event``).

:func:`simulate` times the execution graph of :mod:`trainsim.graph` with the costs of :mod:`trainsim.cost` and
returns a :class:`Timeline`; :func:`simulate_job` turns it into the :class:`~trainsim.estimate.Estimate` the
predictor reports (same fields as the analytic engine; the breakdown sums to the iteration time) plus extra fields
(per-stage busy/idle, engine statistics, stragglers, memory timeline) and writes the requested files (Chrome trace,
memory timeline, op trace). See ``docs/engine.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from trainsim.cost.job_costs import CostModel, default_cost_model
from trainsim.engine import memory as _memory
from trainsim.engine.analysis import analyse
from trainsim.engine.chrome import write_trace
from trainsim.engine.memory import StageMemoryTimeline, memory_timeline
from trainsim.engine.optrace import export_op_trace, op_trace
from trainsim.engine.simulate import simulate
from trainsim.engine.stragglers import Heterogeneity, heterogeneity
from trainsim.engine.timeline import Timeline
from trainsim.errors import TrainsimError
from trainsim.estimate import Estimate
from trainsim.graph.build import Kind
from trainsim.io.atomic import atomic_path, write_text_atomic
from trainsim.spec.job import Job

__all__ = [
    "Heterogeneity",
    "StageMemoryTimeline",
    "Timeline",
    "estimate_of",
    "export_op_trace",
    "heterogeneity",
    "memory_timeline",
    "op_trace",
    "simulate",
    "simulate_job",
    "simulate_job_timeline",
    "write_memory_timeline",
    "write_trace",
]


def estimate_of(tl: Timeline, model: CostModel) -> tuple[Estimate, dict[str, Any]]:
    """The :class:`Estimate` of a timeline (mean over its steps) and the per-unit details."""
    breakdown, busy, crit, detail = analyse(tl)
    overhead = model.calibration.iteration_overhead_s
    breakdown["other"] = overhead
    iteration = float(np.mean(tl.step_end())) + overhead
    stages = tl.graph.stage_costs
    total_compute = sum(s.total.fwd_compute + s.total.bwd_compute - s.total.host_wait for s in stages)
    measured = sum(s.total.measured for s in stages)
    comm = sum(s.total.comm for s in stages)
    comm_measured = sum(s.total.comm_measured for s in stages)
    est = Estimate(iteration, breakdown, busy, crit, measured / total_compute if total_compute else 0.0,
                   comm_measured / comm if comm else 0.0)
    return est, detail


def write_memory_timeline(stages: list[StageMemoryTimeline], path: str | os.PathLike[str]) -> Path:
    """Write per-stage memory over time: JSON (``.json``) or long CSV ``stage,t_s,bytes`` (``.csv``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix.lower() == ".csv":
        import pandas as pd

        frames = [pd.DataFrame({"stage": s.stage, "t_s": s.times_s, "bytes": s.bytes}) for s in stages]
        with atomic_path(p) as tmp:
            pd.concat(frames, ignore_index=True).to_csv(tmp, index=False)
    else:
        write_text_atomic(p, json.dumps({"unit": "bytes, seconds from the start of the step",
                                         "stages": [s.as_dict(series=True) for s in stages]}, allow_nan=False))
    return p


def _engine_info(tl: Timeline) -> dict[str, Any]:
    g = tl.graph
    return {
        "tasks": g.num_tasks,
        "levels": len(g.levels) - 1,
        "replica_classes": tl.classes,
        "simulated_steps": tl.sim_steps,
        "steps": tl.steps,
        "symmetric": tl.scenario.symmetric,
        "p2p_mode": g.p2p_mode,
        "fixed_point_iterations": tl.iterations,
        "fixed_point_residual_s": tl.residual,
        "contended_flows": tl.contended_flows,
        "overlapped_compute_tasks": tl.overlapped_tasks,
    }


def check_event_size(job: Job, steps: int) -> None:
    """Refuse event simulations too large to finish (micro-batches × pipeline chunks × steps, see spec.limits)."""
    from trainsim.spec.limits import MAX_EVENT_UNITS

    if not isinstance(steps, int) or steps < 1:
        raise TrainsimError("steps", f"must be a positive integer (got {steps!r})", "give --steps 1 or more")
    units = job.num_microbatches * job.parallelism.pp * job.parallelism.vpp * steps
    if units > MAX_EVENT_UNITS:
        raise TrainsimError(
            "engine", f"the event engine would simulate {units:,} micro-batch stage steps (limit {MAX_EVENT_UNITS:,})",
            "use --engine analytic, fewer --steps, or a larger --micro-batch-size")


def simulate_job(job: Job, cost_model: CostModel | None = None, **options: Any) -> tuple[Estimate, dict[str, Any]]:
    """Simulate ``job`` and return its :class:`Estimate` and the extra fields of the prediction (the options of
    :func:`simulate_job_timeline`)."""
    est, extra, _ = simulate_job_timeline(job, cost_model, **options)
    return est, extra


def simulate_job_timeline(
        job: Job, cost_model: CostModel | None = None, *, slow_rank: Any = None, slow_stage: Any = None,
        slow_link: Any = None, seq_len_cv: float = 0.0, seed: int = 0, steps: int = 1, link_sharing: bool = True,
        trace: str | os.PathLike[str] | None = None, trace_detail: str = "auto",
        memory_timeline: bool | str | os.PathLike[str] = False, export_ops: str | os.PathLike[str] | None = None,
        export_meta: str | os.PathLike[str] | None = None) -> tuple[Estimate, dict[str, Any], Timeline]:
    """Simulate ``job`` and return its :class:`Estimate`, the extra fields of the prediction and the timeline.

    ``slow_rank``/``slow_stage``/``slow_link``: ``{key: factor}`` or ``["KEY=FACTOR", ...]``; ``seq_len_cv`` and
    ``seed``: sequence-length variation; ``steps``: steps simulated (and exported). Files: ``trace`` (Chrome/
    Perfetto JSON, ``.gz`` to compress; ``trace_detail`` auto | block | layer), ``memory_timeline`` (``True`` for the
    peaks in the result, a path to also write the series), ``export_ops``/``export_meta`` (released trace schema).
    """
    if export_meta is not None and export_ops is None:
        raise TrainsimError("export_meta", "needs --export-ops (the trace the metadata describes)",
                            "add --export-ops ops.parquet")
    check_event_size(job, steps)
    model = cost_model or default_cost_model(job)
    tl = simulate(job, model, slow_rank=slow_rank, slow_stage=slow_stage, slow_link=slow_link, seq_len_cv=seq_len_cv,
                  seed=seed, steps=steps, link_sharing=link_sharing)
    est, detail = estimate_of(tl, model)
    extra: dict[str, Any] = {"stage_busy_idle": detail["stage_busy_idle"], "engine_info": _engine_info(tl)}
    crit_cls = detail["critical_class"]
    reps = tl.replicas_of(crit_cls)
    extra["critical_unit"] = {"stage": est.critical_stage, "dp_replicas": list(reps),
                              "representative_rank": int(tl.layout.representative(reps[0], est.critical_stage))}
    overhead = model.calibration.iteration_overhead_s
    if tl.steps > 1 or tl.sim_steps > 1:
        extra["step_times_s"] = (tl.step_times() + overhead).tolist()
    if tl.heterogeneity.active:
        base = simulate(job, model, steps=1, link_sharing=link_sharing, graph=tl.graph)
        t0 = float(base.step_end()[0]) + overhead
        info: dict[str, Any] = dict(tl.heterogeneity.as_dict())
        info["baseline_iteration_time_s"] = t0
        info["slowdown"] = est.iteration_time_s / t0
        if tl.classes <= 64:
            ends = tl.end[tl.graph.ids(Kind.OPT)]
            info["replica_classes"] = [
                {"dp_replicas": list(tl.replicas_of(c)),
                 "compute_factor_per_stage": tl.scenario.compute[c].tolist(),
                 "finish_s": float(np.mean([ends[:, tl.column(k, c)].max() for k in range(tl.sim_steps)]))}
                for c in range(tl.classes)]
        extra["stragglers"] = info
    if memory_timeline is not False and memory_timeline is not None:
        stages = _memory.memory_timeline(tl)
        out: dict[str, Any] = {"stages": [s.as_dict(series=False) for s in stages],
                               "peak_bytes": max(s.peak_bytes for s in stages),
                               "analytic_peak_bytes": max(s.analytic_peak_bytes for s in stages)}
        if not isinstance(memory_timeline, bool):
            out["file"] = str(write_memory_timeline(stages, memory_timeline))
        extra["memory_timeline"] = out
    if trace is not None:
        written, used = write_trace(tl, trace, trace_detail)
        extra["trace"] = {"file": str(trace), "events": written.events, "detail": used}
    if export_ops is not None:
        tp, mp, rows = export_op_trace(tl, export_ops, export_meta)
        extra["op_trace"] = {"trace": str(tp), "meta": str(mp), "rows": rows, "steps": tl.steps}
    return est, extra, tl
