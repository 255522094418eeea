"""Result tables and metrics of a simulation: ``jobs`` (one row per job), ``allocations`` (one row per allocation
segment) and ``metrics`` (cluster-level numbers), plus writing them to ``--out DIR``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainsim.cluster.engine import ALLOCATION_COLUMNS, SimulationResult
from trainsim.spec.framework import DEFAULT_FRAMEWORK

JOB_COLUMNS = ("job_id", "model", "tenant", "submit_time_s", "admitted", "reject_reason", "first_start_s", "end_s",
               "deadline_s", "met_deadline", "jct_s", "queue_s", "iterations", "gpu_hours", "cost_usd", "restarts",
               "lost_gpu_hours", "plans")


def allocations_frame(res: SimulationResult) -> pd.DataFrame:
    """One row per allocation segment (columns :data:`~trainsim.cluster.engine.ALLOCATION_COLUMNS`)."""
    df = pd.DataFrame.from_records(res.rows, columns=list(ALLOCATION_COLUMNS))
    if df.empty:
        df = pd.DataFrame({c: pd.Series(dtype=float) for c in ALLOCATION_COLUMNS})
    for c in ("gpus", "tp", "pp", "dp", "iterations"):
        df[c] = df[c].astype(np.int64)
    return df


def jobs_frame(res: SimulationResult, alloc: pd.DataFrame) -> pd.DataFrame:
    """One row per job of the trace, in trace order."""
    price = {p.name: p.price for p in res.cluster.pools}
    per_job: dict[str, list[tuple[Any, ...]]] = {}
    for r in res.rows:
        per_job.setdefault(r[0], []).append(r)
    out = []
    for rec in res.jobs:
        s = rec.spec
        rows = per_job.get(s.job_id, [])
        gpu_s = math.fsum(r[5] * (r[2] - r[1]) for r in rows)
        useful_gpu_s = math.fsum(r[5] * r[12] for r in rows)
        cost = math.fsum(r[5] * (r[2] - r[1]) / 3600.0 * price[r[3]] for r in rows)
        end = rec.end if rec.finished else None
        jct = end - s.submit_time_s if end is not None else None
        met = None
        if s.deadline_s is not None:
            met = bool(end is not None and end <= s.deadline_s)
        out.append({
            "job_id": s.job_id, "model": s.model, "tenant": s.tenant, "submit_time_s": s.submit_time_s,
            "admitted": rec.rejected is None, "reject_reason": rec.rejected or "",
            "first_start_s": rec.first_start, "end_s": end, "deadline_s": s.deadline_s, "met_deadline": met,
            "jct_s": jct, "queue_s": (rec.first_start - s.submit_time_s) if rec.first_start is not None else None,
            "iterations": s.iterations, "gpu_hours": gpu_s / 3600.0, "cost_usd": cost,
            "restarts": max(0, rec.starts - 1), "lost_gpu_hours": (gpu_s - useful_gpu_s) / 3600.0,
            "plans": "|".join(rec.plans),
        })
    df = pd.DataFrame(out, columns=list(JOB_COLUMNS))
    for c in ("first_start_s", "end_s", "deadline_s", "jct_s", "queue_s"):
        df[c] = df[c].astype(float)
    df["met_deadline"] = df["met_deadline"].astype("boolean")
    return df


def _jain(x: np.ndarray) -> float:
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if len(x) and (x ** 2).sum() > 0 else 1.0


def metrics(res: SimulationResult, jobs: pd.DataFrame, alloc: pd.DataFrame) -> dict[str, Any]:
    """Cluster-level metrics (see docs/cluster.md for the definitions)."""
    n_gpus = res.cluster.num_gpus
    done = jobs["end_s"].notna().to_numpy()
    jct = jobs.loc[done, "jct_s"].to_numpy()
    with_dl = jobs["deadline_s"].notna().to_numpy()
    met = jobs["met_deadline"].fillna(False).to_numpy(dtype=bool)
    start = float(jobs["submit_time_s"].min())
    end = float(np.nanmax(jobs["end_s"].to_numpy())) if done.any() else start
    makespan = end - start
    gpu_s = math.fsum((alloc["gpus"] * (alloc["t1_s"] - alloc["t0_s"])).tolist())
    # model FLOPs actually computed: MFU of the plan × useful GPU time × peak, summed per segment
    flop = 0.0
    pools = {p.name: p for p in res.cluster.pools}
    mfu_of: dict[tuple[str, str, int], float] = {}
    spec_of = {r.spec.job_id: r for r in res.jobs}
    for r in res.rows:
        rec = spec_of[r[0]]
        key = (r[0], r[3], r[5])
        if key not in mfu_of:
            p = res.throughput.point(rec.spec, pools[r[3]], r[5])
            mfu_of[key] = p.mfu if p is not None else 0.0
        flop += mfu_of[key] * r[5] * r[12]
    peak_s = makespan * n_gpus
    queue = jobs.loc[jobs["queue_s"].notna(), "queue_s"].to_numpy()
    tenants = jobs.loc[done].groupby("tenant")["gpu_hours"].sum().to_numpy()
    ftf = _finish_time_fairness(res, jobs)

    def q(p: float) -> float | None:
        return float(np.percentile(jct, p)) if jct.size else None

    return {
        "policy": res.policy,
        "throughput": res.throughput.source + ("" if res.throughput.source == "table" else f":{res.throughput.space}"),
        "framework": res.throughput.framework or DEFAULT_FRAMEWORK,
        "n_jobs": len(jobs),
        "n_finished": int(done.sum()),
        "dsr": float(met[with_dl].mean()) if with_dl.any() else None,
        "n_with_deadline": int(with_dl.sum()),
        "n_met": int(met[with_dl].sum()),
        "n_rejected": int((~jobs["admitted"]).sum()),
        "jct_mean_s": float(jct.mean()) if jct.size else None,
        "jct_p50_s": q(50), "jct_p95_s": q(95), "jct_p99_s": q(99),
        "n_censored": int((~done).sum()),
        "makespan_s": makespan,
        "queue_mean_s": float(queue.mean()) if queue.size else None,
        "gpu_hours": gpu_s / 3600.0,
        "gpu_util": gpu_s / peak_s if peak_s > 0 else 0.0,
        "goodput_util": flop / peak_s if peak_s > 0 else 0.0,
        "cost_usd": float(math.fsum(jobs["cost_usd"].tolist())),
        "lost_gpu_hours": float(math.fsum(jobs["lost_gpu_hours"].tolist())),
        "restarts": int(jobs["restarts"].sum()),
        "fairness": _jain(tenants),
        "ftf_mean": ftf["ftf_mean"],
        "ftf_max": ftf["ftf_max"],
        "events": res.events,
        "num_gpus": n_gpus,
    }


def _finish_time_fairness(res: SimulationResult, jobs: pd.DataFrame) -> dict[str, float | None]:
    """Themis's finish-time fairness ρ = JCT / (iterations × iteration time on the requested GPUs, alone)."""
    rhos = []
    for rec, jct in zip(res.jobs, jobs["jct_s"].tolist(), strict=True):
        if jct is None or (isinstance(jct, float) and math.isnan(jct)):
            continue
        pools = [p for p in res.cluster.pools if rec.spec.pool is None or p.name == rec.spec.pool]
        t = min(res.throughput.iteration_time(rec.spec, p, rec.spec.requested_gpus) for p in pools)
        if math.isfinite(t) and t > 0:
            rhos.append(jct / (rec.spec.iterations * t))
    if not rhos:
        return {"ftf_mean": None, "ftf_max": None}
    return {"ftf_mean": float(np.mean(rhos)), "ftf_max": float(np.max(rhos))}


def write_outputs(out: Path, jobs: pd.DataFrame, alloc: pd.DataFrame, mets: dict[str, Any],
                  plots: bool = True) -> list[Path]:
    """Write ``jobs.csv``, ``allocations.parquet``, ``metrics.json`` (and PNG plots) into ``out``, atomically."""
    from trainsim.io.atomic import atomic_path, write_text_atomic

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with atomic_path(out / "jobs.csv") as tmp:
        jobs.to_csv(tmp, index=False, float_format="%.6f")
    written.append(out / "jobs.csv")
    with atomic_path(out / "allocations.parquet") as tmp:
        alloc.to_parquet(tmp, index=False)
    written.append(out / "allocations.parquet")
    write_text_atomic(out / "metrics.json", json.dumps(clean_json(mets), indent=2, sort_keys=True) + "\n")
    written.append(out / "metrics.json")
    if plots:
        from trainsim.cluster.plots import write_plots

        written += write_plots(out, jobs, alloc, mets)
    return written


def clean_json(x: Any) -> Any:
    """Replace non-finite floats by ``None`` recursively (strict JSON)."""
    if isinstance(x, dict):
        return {k: clean_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean_json(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.generic):
        return clean_json(x.item())
    return x
