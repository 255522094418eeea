"""Importers of foreign cluster traces into trainsim's trace schema (``trainsim cluster trace import``).

Formats: ``elasticflow`` (ElasticFlow's generated CSV: ``job_id, submission_time, num_iteration, model_name,
deadline, batch_size, num_gpu, duration``), ``philly`` (Microsoft Philly ``cluster_job_log`` JSON: ``jobid``,
``submitted_time``, ``user``, ``attempts[].start_time/end_time/detail[].gpus``), ``helios`` (SenseTime Helios
``cluster_log.csv``: ``job_id, user, gpu_num, submit_time, duration, …``) and ``acme`` (Shanghai AI Lab Acme
``trace_*.csv``: ``job_id, user, gpu_num, submit_time, duration, …``).

Model names are mapped to trainsim models with ``NAME=PRESET`` pairs (``*=PRESET`` for every other name; formats
without a model use ``default_model``). Conversions, all documented in docs/cluster.md: submission times become
seconds after the first submission; formats without an iteration count get ``round(duration / iteration time on the
requested GPUs)`` (at least 1, the ``best`` plan on the cluster's first pool); a request below the smallest GPU count
the mapped model fits on is raised to that count (the model would not run otherwise). Jobs with no GPU or no
duration are dropped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from trainsim.cluster.spec import load_cluster
from trainsim.cluster.throughput import ThroughputModel
from trainsim.cluster.trace import JobSpec, records
from trainsim.errors import TrainsimError

FORMATS = ("elasticflow", "philly", "helios", "acme")


def parse_mapping(items: list[str], default_model: str) -> dict[str, str]:
    """``["bert=gpt3-1.7b", "*=gpt3-7.5b"]`` → mapping (``*`` defaults to ``default_model``)."""
    out = {"*": default_model}
    for item in items:
        if "=" not in item:
            raise TrainsimError("--map", f"cannot read {item!r}", "write NAME=PRESET, e.g. bert=gpt3-1.7b")
        k, v = (s.strip() for s in item.split("=", 1))
        out[k] = v
    from trainsim.spec.presets import load_model

    for v in dict.fromkeys(out.values()):
        try:
            load_model(v)
        except TrainsimError as exc:
            raise TrainsimError("--map", exc.message, exc.hint) from None
    return out


def _read_csv(path: Path, need: set[str], fmt: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise TrainsimError("trace", f"cannot read '{path}': {str(exc).splitlines()[0]}", f"give a {fmt} CSV") \
            from None
    missing = need - set(df.columns)
    if missing:
        raise TrainsimError("--format", f"'{path}' lacks the {fmt} columns {sorted(missing)}",
                            f"check the format (one of {', '.join(FORMATS)})")
    return df


def _seconds(col: pd.Series) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(col.dtype):
        return col.to_numpy(dtype=float)
    t = pd.to_datetime(col, errors="coerce")
    if t.isna().any():
        i = int(np.argmax(t.isna().to_numpy()))
        raise TrainsimError(f"trace row {i + 1}, submit_time", f"cannot read {col.iloc[i]!r} as a time",
                            "give seconds or a date-time")
    return (t - t.min()).dt.total_seconds().to_numpy()


def _philly(path: Path) -> pd.DataFrame:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TrainsimError("trace", f"cannot read '{path}' as Philly JSON: {exc}", "give cluster_job_log") from None
    rows = []
    for job in data:
        attempts = job.get("attempts") or []
        if not attempts:
            continue
        gpus = sum(len(d.get("gpus", [])) for d in attempts[0].get("detail", []))
        starts = [a.get("start_time") for a in attempts if a.get("start_time")]
        ends = [a.get("end_time") for a in attempts if a.get("end_time")]
        if not starts or not ends:
            continue
        dur = (pd.Timestamp(max(ends)) - pd.Timestamp(min(starts))).total_seconds()
        rows.append({"job_id": job.get("jobid"), "submit": job.get("submitted_time"), "gpus": gpus,
                     "duration": dur, "tenant": job.get("user", "default"), "name": None})
    return pd.DataFrame(rows, columns=["job_id", "submit", "gpus", "duration", "tenant", "name"])


def import_trace(path: str | Path, fmt: str, mapping: list[str] | None = None, *, default_model: str = "gpt3-1.7b",
                 gbs: int = 512, cluster: str = "dgx-a100:128", limit: int | None = None) -> pd.DataFrame:
    """Read a foreign trace and return it in trainsim's schema (not yet validated)."""
    p = Path(path)
    if fmt not in FORMATS:
        raise TrainsimError("--format", f"unknown format {fmt!r}", f"use {', '.join(FORMATS)}")
    if not p.exists():
        raise TrainsimError("trace", f"file '{p}' does not exist", "give the trace file")
    models = parse_mapping(mapping or [], default_model)
    iterations: np.ndarray | None = None
    deadline: np.ndarray | None = None
    batch: np.ndarray | None = None
    if fmt == "elasticflow":
        df = _read_csv(p, {"job_id", "submission_time", "num_iteration", "model_name", "batch_size", "num_gpu"}, fmt)
        raw = pd.DataFrame({"job_id": df["job_id"], "submit": df["submission_time"], "gpus": df["num_gpu"],
                            "duration": df.get("duration", pd.Series(np.ones(len(df)))), "tenant": "default",
                            "name": df["model_name"]})
        iterations = df["num_iteration"].to_numpy()
        deadline = df["deadline"].to_numpy(dtype=float) if "deadline" in df.columns else None
        batch = df["batch_size"].to_numpy()
    elif fmt == "philly":
        raw = _philly(p)
    else:
        df = _read_csv(p, {"job_id", "gpu_num", "submit_time", "duration"}, fmt)
        raw = pd.DataFrame({"job_id": df["job_id"], "submit": df["submit_time"], "gpus": df["gpu_num"],
                            "duration": df["duration"], "tenant": df.get("user", "default"), "name": None})
    keep = (pd.to_numeric(raw["gpus"], errors="coerce").fillna(0) > 0) & \
           (pd.to_numeric(raw["duration"], errors="coerce").fillna(0) > 0)
    idx = np.flatnonzero(keep.to_numpy())
    if limit is not None:
        idx = idx[:limit]
    if idx.size == 0:
        raise TrainsimError("trace", f"'{p}' has no job with GPUs and a duration", "check the file and --format")
    raw = raw.iloc[idx].reset_index(drop=True)
    submit_all = _seconds(raw["submit"])
    t0 = float(submit_all.min())
    submit = submit_all - t0
    spec = load_cluster(cluster)
    pool = spec.pools[0]
    tm = ThroughputModel(source="best")
    rows = []
    for k, r in enumerate(records(raw)):
        name = None if r.name is None or (isinstance(r.name, float) and math.isnan(r.name)) else str(r.name)
        model = models.get(name, models["*"]) if name is not None else models["*"]
        b = int(batch[idx[k]]) if batch is not None else gbs
        probe = JobSpec(0, "probe", 0.0, model, b, None, 1, None, 1, None, None, 1.0, "default", None, None)
        need = tm.curve(probe, pool).min_size
        if need is None:
            raise TrainsimError("--map", f"{model} fits on no GPU count of pool {pool.name}", "map to a smaller model")
        n = max(int(r.gpus), need)
        if iterations is not None:
            iters = int(iterations[idx[k]])
        else:
            t = tm.iteration_time(probe, pool, n)
            iters = max(1, round(float(r.duration) / t)) if math.isfinite(t) else 1
        dl = np.nan
        if deadline is not None and not math.isnan(deadline[idx[k]]):
            dl = float(deadline[idx[k]]) - t0
        rows.append({"job_id": str(r.job_id), "submit_time_s": float(submit[k]), "model": model,
                     "global_batch_size": b, "iterations": iters, "deadline_s": dl, "requested_gpus": n,
                     "tenant": str(r.tenant)})
    return pd.DataFrame(rows)
