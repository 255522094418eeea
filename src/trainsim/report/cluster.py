"""Cluster page: a multi-tenant scheduling run (``trainsim cluster run --report FILE``).

:func:`write_cluster_report` takes the cluster simulator's tables: ``jobs`` (one row per job: ``job_id, model,
tenant, submit_time_s, admitted, reject_reason, first_start_s, end_s, deadline_s, met_deadline, jct_s, queue_s,
gpu_hours, cost_usd, restarts, lost_gpu_hours, plans``), ``allocations`` (one row per interval a job held GPUs:
``job_id, t0_s, t1_s, pool, nodes, gpus, tp, pp, dp, iter_time_s``) and ``metrics`` (``dsr, jct_mean_s,
makespan_s, gpu_util, ...``), and writes one self-contained page: metric cards, a Gantt chart of the allocations,
GPUs in use over time per pool, the CDF of job completion times, and the job table.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.report.page import (
    PALETTE,
    Page,
    bar_width,
    fmt_money,
    fmt_pct,
    fmt_time,
    num,
    segment_trace,
    text,
    time_unit,
)

JOB_COLUMNS: tuple[str, ...] = (
    "job_id", "model", "tenant", "submit_time_s", "admitted", "reject_reason", "first_start_s", "end_s", "deadline_s",
    "met_deadline", "jct_s", "queue_s", "gpu_hours", "cost_usd", "restarts", "lost_gpu_hours", "plans",
)
ALLOCATION_COLUMNS: tuple[str, ...] = ("job_id", "t0_s", "t1_s", "pool", "nodes", "gpus", "tp", "pp", "dp",
                                       "iter_time_s")

#: Metric cards: key, label, formatter, note. Other numeric keys of ``metrics`` follow as generic cards.
_CARDS: tuple[tuple[str, str, str, str], ...] = (
    ("dsr", "deadline satisfaction", "pct", "jobs with a deadline that met it"),
    ("jct_mean_s", "mean JCT", "time", "job completion time, submit to end"),
    ("jct_p50_s", "median JCT", "time", ""),
    ("jct_p95_s", "p95 JCT", "time", ""),
    ("jct_p99_s", "p99 JCT", "time", ""),
    ("makespan_s", "makespan", "time", "first submit to last end"),
    ("queue_mean_s", "mean queueing", "time", "submit to first start"),
    ("gpu_util", "GPU utilisation", "pct", "allocated GPU time / capacity"),
    ("goodput_util", "goodput utilisation", "pct", "cluster-level MFU"),
    ("cost_usd", "cost", "money", "GPU-hours × price"),
    ("lost_gpu_hours", "lost GPU-hours", "num", "work redone after failures"),
    ("restarts", "restarts", "int", ""),
    ("n_rejected", "rejected jobs", "int", "not admitted"),
    ("n_jobs", "jobs", "int", ""),
    ("n_finished", "finished jobs", "int", ""),
    ("gpu_hours", "GPU-hours", "num", "allocated"),
)


def _check(frame: Any, columns: tuple[str, ...], name: str) -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame):
        raise TrainsimError(name, f"expected a pandas DataFrame, got {type(frame).__name__}",
                            "pass the cluster simulator's table")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise TrainsimError(name, f"missing column(s) {', '.join(missing)}", f"give the columns {', '.join(columns)}")
    return frame


def _fmt(kind: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if kind == "pct":
        return fmt_pct(float(value))
    if kind == "time":
        return fmt_time(float(value))
    if kind == "money":
        return fmt_money(float(value))
    if kind == "int":
        return f"{int(value):,}"
    return f"{float(value):,.3g}"


def metric_cards(metrics: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Cards for the known metrics, then any other numeric metric by its key."""
    cards: list[tuple[str, str, str]] = []
    known = {"n_with_deadline", "n_met"}  # shown in the DSR card
    for key, label, kind, note in _CARDS:
        if key in metrics:
            known.add(key)
            extra = ""
            if key == "dsr" and "n_with_deadline" in metrics and "n_met" in metrics:
                extra = f"{int(metrics['n_met'])} of {int(metrics['n_with_deadline'])} jobs with a deadline"
            cards.append((label, _fmt(kind, metrics[key]), extra or note))
    flat: list[tuple[str, Any]] = []
    for key, value in metrics.items():
        if isinstance(value, dict):  # e.g. fairness: {jain_tenant_gpu_hours, ftf_mean, ...}
            flat += [(f"{key} {sub}", v) for sub, v in value.items()]
        else:
            flat.append((key, value))
    for key, value in flat:
        if key in known or isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            continue
        kind = "time" if key.endswith("_s") else "int" if isinstance(value, int | np.integer) else "num"
        cards.append((key.replace("_", " "), _fmt(kind, value), ""))
    return cards


def _gantt(allocations: pd.DataFrame, jobs: pd.DataFrame, scale: float, unit: str) -> dict[str, Any]:
    order = list(dict.fromkeys(jobs["job_id"].astype(str).tolist() + allocations["job_id"].astype(str).tolist()))
    started = set(allocations["job_id"].astype(str))
    order = [j for j in order if j in started]
    height = _gantt_height(allocations)
    width = bar_width(len(order), height)
    pools = sorted(allocations["pool"].astype(str).unique().tolist())
    traces = []
    model_of = dict(zip(jobs["job_id"].astype(str), jobs["model"].astype(str), strict=False))
    for k, pool in enumerate(pools):
        sub = allocations[allocations["pool"].astype(str) == pool]
        hover = [f"job {j} ({model_of.get(str(j), '?')})<br>pool {pool}, {int(g)} GPUs on {n}<br>"
                 f"tp {int(tp)} · pp {int(pp)} · dp {int(dp)}, iteration {fmt_time(float(it))}<br>"
                 f"{fmt_time(float(a))} → {fmt_time(float(b))}"
                 for j, g, n, tp, pp, dp, it, a, b in zip(sub["job_id"], sub["gpus"], sub["nodes"], sub["tp"],
                                                         sub["pp"], sub["dp"], sub["iter_time_s"], sub["t0_s"],
                                                         sub["t1_s"], strict=True)]
        traces.append(segment_trace(f"pool {pool}", (sub["t0_s"] / scale).tolist(), (sub["t1_s"] / scale).tolist(),
                                    sub["job_id"].astype(str).tolist(), hover, PALETTE[k % len(PALETTE)], width))
    deadlines = jobs[jobs["deadline_s"].notna() & jobs["job_id"].astype(str).isin(sorted(started))]
    if len(deadlines):
        met = deadlines["met_deadline"].fillna(False).astype(bool)
        traces.append({"type": "scatter", "mode": "markers", "name": "deadline",
                       "x": (deadlines["deadline_s"] / scale).tolist(), "y": deadlines["job_id"].astype(str).tolist(),
                       "marker": {"symbol": "line-ns-open", "size": max(8, min(width + 4, 20)),
                                  "color": ["#2e7d32" if m else "#c62828" for m in met], "line": {"width": 2}},
                       "hovertext": [f"deadline of job {j}: {'met' if m else 'MISSED'}"
                                     for j, m in zip(deadlines["job_id"], met, strict=True)], "hoverinfo": "text"})
    return {"data": traces, "layout": {
        "height": height, "hovermode": "closest", "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        "xaxis": {"title": {"text": f"time ({unit})"}},
        "yaxis": {"title": {"text": "job"}, "type": "category", "categoryorder": "array", "categoryarray": order,
                  "range": [len(order) - 0.5, -0.5]}}}


def utilisation_series(allocations: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """GPUs in use over time per pool: ``{pool: (times_s, gpus)}`` as step functions (value from each time on)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for pool, sub in allocations.groupby(allocations["pool"].astype(str), sort=True):
        t = np.concatenate([sub["t0_s"].to_numpy(float), sub["t1_s"].to_numpy(float)])
        d = np.concatenate([sub["gpus"].to_numpy(float), -sub["gpus"].to_numpy(float)])
        order = np.lexsort((d, t))
        t, d = t[order], np.cumsum(d[order])
        keep = np.append(t[1:] != t[:-1], True)  # the level after the last change at each instant
        out[str(pool)] = (t[keep], d[keep])
    return out


def _utilisation(allocations: pd.DataFrame, metrics: dict[str, Any], scale: float, unit: str) -> dict[str, Any]:
    series = utilisation_series(allocations)
    grid = np.unique(np.concatenate([t for t, _ in series.values()])) if series else np.zeros(0)
    traces = []
    for k, (pool, (t, g)) in enumerate(series.items()):
        idx = np.searchsorted(t, grid, side="right") - 1
        level = np.where(idx >= 0, g[np.clip(idx, 0, None)], 0.0)
        traces.append({"type": "scatter", "mode": "lines", "name": f"pool {pool}", "x": (grid / scale).tolist(),
                       "y": level.tolist(), "line": {"shape": "hv", "width": 0.5, "color": PALETTE[k % len(PALETTE)]},
                       "stackgroup": "gpus", "hovertemplate": f"pool {pool}: %{{y:,.0f}} GPUs<extra></extra>"})
    layout: dict[str, Any] = {"height": 320, "hovermode": "x unified",
                              "xaxis": {"title": {"text": f"time ({unit})"}},
                              "yaxis": {"title": {"text": "GPUs allocated"}, "rangemode": "tozero"},
                              "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"}}
    capacity = next((metrics[k] for k in ("total_gpus", "cluster_gpus", "capacity_gpus", "num_gpus")
                     if isinstance(metrics.get(k), int | float)), None)
    if capacity:
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": capacity, "y1": capacity,
                             "line": {"color": "#c62828", "dash": "dash", "width": 1.5}}]
        layout["annotations"] = [{"xref": "paper", "x": 1, "y": capacity, "text": f"capacity {capacity:,.0f} GPUs",
                                  "showarrow": False, "yanchor": "bottom", "xanchor": "right"}]
    return {"data": traces, "layout": layout}


def _jct_cdf(jobs: pd.DataFrame, scale: float, unit: str) -> dict[str, Any]:
    done = jobs[jobs["jct_s"].notna()]
    traces = []

    def cdf(values: np.ndarray, name: str, color: str, width: float) -> dict[str, Any]:
        v = np.sort(values)
        p = np.arange(1, len(v) + 1) / len(v)
        v, p = np.concatenate(([v[0]], v)), np.concatenate(([0.0], p))  # the step up at the first job
        return {"type": "scatter", "mode": "lines", "name": name, "x": (v / scale).tolist(), "y": p.tolist(),
                "line": {"shape": "hv", "color": color, "width": width},
                "hovertemplate": f"{name}: %{{y:.0%}} of jobs within %{{x:.3g}} {unit}<extra></extra>"}

    if len(done):
        traces.append(cdf(done["jct_s"].to_numpy(float), "all jobs", "#111827", 2.5))
        tenants = sorted(done["tenant"].astype(str).unique().tolist())
        if 1 < len(tenants) <= 8:
            for k, t in enumerate(tenants):
                sub = done[done["tenant"].astype(str) == t]["jct_s"].to_numpy(float)
                traces.append(cdf(sub, f"tenant {t}", PALETTE[k % len(PALETTE)], 1.5))
    return {"data": traces, "layout": {"height": 340, "hovermode": "closest",
                                       "xaxis": {"title": {"text": f"job completion time ({unit})"}},
                                       "yaxis": {"title": {"text": "fraction of finished jobs"}, "range": [0, 1.02],
                                                 "tickformat": ".0%"},
                                       "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"}}}


def _job_rows(jobs: pd.DataFrame) -> list[list[Any]]:
    rows = []
    for d in jobs.to_dict("records"):
        admitted = bool(d["admitted"]) if pd.notna(d["admitted"]) else False
        met = d["met_deadline"]
        met_text = "–" if pd.isna(d["deadline_s"]) else ("met" if bool(met) else "missed")
        status = "rejected: " + str(d["reject_reason"]) if not admitted else (
            "finished" if pd.notna(d["end_s"]) else "unfinished")
        rows.append([text(d["job_id"]), text(d["model"]), text(d["tenant"]), text(status),
                     num(_f(d["submit_time_s"]), "{:,.0f}"), num(_f(d["queue_s"]), "{:,.0f}"),
                     num(_f(d["jct_s"]), "{:,.0f}"), text(met_text), num(_f(d["gpu_hours"]), "{:,.0f}"),
                     num(_f(d["cost_usd"]), "${:,.0f}"), num(_f(d["restarts"]), "{:,.0f}"),
                     num(_f(d["lost_gpu_hours"]), "{:,.1f}"), text(d["plans"] if pd.notna(d["plans"]) else "")])
    return rows


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def cluster_page(jobs: pd.DataFrame, allocations: pd.DataFrame, metrics: dict[str, Any],
                 title: str = "Cluster scheduling run") -> Page:
    """Build the cluster page (see the module docstring)."""
    jobs = _check(jobs, JOB_COLUMNS, "jobs")
    allocations = _check(allocations, ALLOCATION_COLUMNS, "allocations")
    if not isinstance(metrics, dict):
        raise TrainsimError("metrics", f"expected a dict, got {type(metrics).__name__}", "pass the metrics mapping")
    n_jobs = len(jobs)
    admitted_mask = jobs["admitted"].fillna(False).astype(bool).to_numpy()
    admitted = int(admitted_mask.sum())
    pools = len(set(allocations["pool"].astype(str)))
    has_jct = bool(np.isfinite(jobs["jct_s"].to_numpy(float)).any())
    end = float(np.nanmax(allocations["t1_s"].to_numpy(float))) if len(allocations) else 0.0
    scale, unit = time_unit(max(end, float(metrics.get("makespan_s") or 0.0), 1e-9))
    labels = [f"{k} {metrics[k]}" for k in ("policy", "throughput") if isinstance(metrics.get(k), str)]
    page = Page(title, f"{n_jobs:,} jobs ({admitted:,} admitted), {len(allocations):,} allocations on "
                       f"{pools} pool(s)" + (f"; {', '.join(labels)}" if labels else ""), kind="cluster")
    page.section("Headline metrics", anchor="metrics").cards(metric_cards(metrics), id_prefix="metric-")
    jct_unit = time_unit(float(np.nanmax(jobs["jct_s"].to_numpy(float))) if has_jct else 1.0)
    g = page.section("Who ran where, when", "One row per job, one bar per allocation (colour: GPU pool; hover for "
                     "GPUs, nodes and plan). Tick marks: deadlines, green when met, red when missed.", "gantt")
    if len(allocations):
        g.figure(_gantt(allocations, jobs, scale, unit), "gantt", height=_gantt_height(allocations))
    else:
        g.paragraph("no allocations: no job ran")
    u = page.section("GPUs in use over time", "Allocated GPUs per pool (stacked).", "utilisation")
    if len(allocations):
        u.figure(_utilisation(allocations, metrics, scale, unit), "utilisation", height=320)
    c = page.section("Job completion times", "Cumulative distribution of JCT (submit to end) over finished jobs; "
                     "per tenant when there are several.", "jct")
    if has_jct:
        c.figure(_jct_cdf(jobs, *jct_unit), "jct-cdf", height=340)
    else:
        c.paragraph("no job finished")
    rejected = jobs[~admitted_mask]
    t = page.section("Jobs", f"{n_jobs:,} jobs; click a header to sort. Times in seconds.", "jobs")
    if len(rejected):
        reasons = rejected["reject_reason"].fillna("unknown").astype(str).value_counts()
        t.bullets([f"{n} rejected: {reason}" for reason, n in reasons.items()])
    t.table(["job", "model", "tenant", "status", "submit s", "queue s", "JCT s", "deadline", "GPU-h", "cost",
             "restarts", "lost GPU-h", "plans"], _job_rows(jobs), "jobs-table", text_columns=(0, 1, 2, 3, 7, 12))
    return page


def _gantt_height(allocations: pd.DataFrame) -> int:
    rows = len(set(allocations["job_id"].astype(str)))
    return int(min(max(260, 14 * rows + 110), 1400))


def write_cluster_report(jobs: pd.DataFrame, allocations: pd.DataFrame, metrics: dict[str, Any],
                         path: str | os.PathLike[str]) -> Path:
    """Write the cluster page (one self-contained HTML file) to ``path``; return the path.

    The caller checks ``path`` before simulating (:func:`trainsim.io.atomic.check_output_path`); the file is written
    atomically. Raises :class:`~trainsim.errors.TrainsimError` when a table lacks a column.
    """
    return cluster_page(jobs, allocations, metrics).write(path)
