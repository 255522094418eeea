"""Job traces: one row per training job, validated column by column with one-line errors naming row and field.

Columns (SI units): ``job_id`` (unique), ``submit_time_s``, ``model`` (preset, HF ``config.json`` or model JSON),
``global_batch_size``, ``seq_length`` (optional: the model's), ``iterations`` or ``train_tokens`` (one of them per
row), ``deadline_s`` (absolute, optional), ``requested_gpus``, ``min_gpus`` / ``max_gpus`` (optional elastic
bounds), ``weight`` (or ``priority``; default 1), ``tenant`` (default ``default``), ``pool`` (optional constraint),
``plan`` (optional fixed plan ``t2p4d8``), ``framework`` (optional software stack, a preset ``NAME[@version]`` or a
profile YAML; default: the run's ``--framework``). Rows are ordered by submission time, ties by row order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError

REQUIRED = ("job_id", "submit_time_s", "model", "global_batch_size", "requested_gpus")
OPTIONAL = ("seq_length", "iterations", "train_tokens", "deadline_s", "min_gpus", "max_gpus", "weight", "tenant",
            "pool", "plan", "framework")
COLUMNS = REQUIRED + OPTIONAL
ALIASES = {"priority": "weight"}
_PLAN = re.compile(r"^t(\d+)p(\d+)(?:d(\d+))?$")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One validated job of a trace (times in s; ``iterations`` resolved from ``train_tokens`` when needed)."""

    index: int
    job_id: str
    submit_time_s: float
    model: str
    global_batch_size: int
    seq_length: int | None
    iterations: int
    deadline_s: float | None
    requested_gpus: int
    min_gpus: int | None
    max_gpus: int | None
    weight: float
    tenant: str
    pool: str | None
    plan: tuple[int, int] | None
    framework: str | None = None


def records(df: pd.DataFrame) -> Iterator[Any]:
    """The rows of a frame as named tuples (typed ``Any``: their fields are the frame's columns)."""
    return iter(df.itertuples(index=False))


def parse_plan(text: str, where: str) -> tuple[int, int]:
    """``t2p4`` or ``t2p4d8`` → (tp, pp); the data degree follows from the allocation."""
    m = _PLAN.match(str(text).strip().lower())
    if not m:
        raise TrainsimError(where, f"cannot read plan {text!r}", "write it as t<TP>p<PP>[d<DP>], e.g. t2p4d8")
    tp, pp = int(m.group(1)), int(m.group(2))
    if tp < 1 or pp < 1:
        raise TrainsimError(where, f"plan {text!r} has a zero degree", "degrees are positive")
    return tp, pp


def read_trace_file(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet trace (not yet validated)."""
    p = Path(path)
    if not p.exists():
        raise TrainsimError("trace", f"file '{p}' does not exist", "give a CSV or Parquet trace")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(p)
        return pd.read_csv(p, dtype={"job_id": str, "model": str, "tenant": str, "pool": str, "plan": str,
                                     "framework": str})
    except (OSError, ValueError) as exc:
        raise TrainsimError("trace", f"cannot read '{p}': {str(exc).splitlines()[0]}", "give a CSV or Parquet file")\
            from None


def _where(df: pd.DataFrame, i: int, field: str) -> str:
    jid = df["job_id"].iloc[i] if "job_id" in df.columns else "?"
    return f"trace row {i + 1} (job_id {jid}), {field}"


def _numeric(df: pd.DataFrame, col: str, *, integer: bool, required: bool, low: float | None,
             strict_low: bool) -> np.ndarray:
    values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    raw_missing = df[col].isna().to_numpy()
    bad_text = np.isnan(values) & ~raw_missing
    if bad_text.any():
        i = int(np.argmax(bad_text))
        raise TrainsimError(_where(df, i, col), f"{df[col].iloc[i]!r} is not a number", "give a number")
    if required and raw_missing.any():
        i = int(np.argmax(raw_missing))
        raise TrainsimError(_where(df, i, col), "is missing", "every job needs this field")
    present = ~np.isnan(values)
    if (present & ~np.isfinite(values)).any():
        i = int(np.argmax(present & ~np.isfinite(values)))
        raise TrainsimError(_where(df, i, col), "is not finite", "give a finite number")
    if integer:
        frac = present & (values != np.floor(values))
        if frac.any():
            i = int(np.argmax(frac))
            raise TrainsimError(_where(df, i, col), f"{values[i]!r} is not a whole number", "give an integer")
    if low is not None:
        bad = present & ((values <= low) if strict_low else (values < low))
        if bad.any():
            i = int(np.argmax(bad))
            what = "positive" if strict_low and low == 0 else f"at least {low:g}"
            raise TrainsimError(_where(df, i, col), f"must be {what} (got {values[i]:g})",
                                "negative or zero work, times and sizes are not allowed")
    return values


def validate_trace(df: pd.DataFrame, *, check_models: bool = True) -> pd.DataFrame:
    """Check a trace and return it normalised: every column of :data:`COLUMNS`, typed, sorted by submission time.

    Raises one :class:`TrainsimError` naming the first bad row and field.
    """
    df = df.rename(columns={k: v for k, v in ALIASES.items() if k in df.columns and v not in df.columns})
    unknown = [c for c in df.columns if c not in COLUMNS]
    if unknown:
        raise TrainsimError(f"trace column {unknown[0]!r}", "is not a trace column",
                            f"use {', '.join(COLUMNS)} (see docs/cluster.md)")
    for col in REQUIRED:
        if col not in df.columns:
            raise TrainsimError(f"trace column {col!r}", "is missing", f"a trace needs {', '.join(REQUIRED)}")
    if len(df) == 0:
        raise TrainsimError("trace", "has no jobs", "give at least one row")
    df = df.reset_index(drop=True).copy()
    ids = df["job_id"]
    if ids.isna().any():
        i = int(np.argmax(ids.isna().to_numpy()))
        raise TrainsimError(_where(df, i, "job_id"), "is missing", "give every job a unique id")
    df["job_id"] = ids.astype(str)
    dup = df["job_id"].duplicated().to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        raise TrainsimError(_where(df, i, "job_id"), "duplicates an earlier row", "job ids must be unique")
    out = pd.DataFrame({"job_id": df["job_id"]})
    out["submit_time_s"] = _numeric(df, "submit_time_s", integer=False, required=True, low=0, strict_low=False)
    if df["model"].isna().any():
        i = int(np.argmax(df["model"].isna().to_numpy()))
        raise TrainsimError(_where(df, i, "model"), "is missing", "give a model preset or a config file")
    out["model"] = df["model"].astype(str)
    out["global_batch_size"] = _numeric(df, "global_batch_size", integer=True, required=True, low=0,
                                        strict_low=True).astype(np.int64)
    out["requested_gpus"] = _numeric(df, "requested_gpus", integer=True, required=True, low=0,
                                     strict_low=True).astype(np.int64)
    for col in ("seq_length", "min_gpus", "max_gpus"):
        vals = (_numeric(df, col, integer=True, required=False, low=0, strict_low=True) if col in df.columns
                else np.full(len(df), np.nan))
        out[col] = pd.array([None if math.isnan(v) else int(v) for v in vals], dtype="Int64")
    iters = (_numeric(df, "iterations", integer=True, required=False, low=0, strict_low=True)
             if "iterations" in df.columns else np.full(len(df), np.nan))
    tokens = (_numeric(df, "train_tokens", integer=False, required=False, low=0, strict_low=True)
              if "train_tokens" in df.columns else np.full(len(df), np.nan))
    none = np.isnan(iters) & np.isnan(tokens)
    if none.any():
        i = int(np.argmax(none))
        raise TrainsimError(_where(df, i, "iterations"), "neither iterations nor train_tokens is given",
                            "give the work of every job")
    both = ~np.isnan(iters) & ~np.isnan(tokens)
    if both.any():
        i = int(np.argmax(both))
        raise TrainsimError(_where(df, i, "train_tokens"), "both iterations and train_tokens are given",
                            "give one of them")
    out["iterations"] = pd.array([None if math.isnan(v) else int(v) for v in iters], dtype="Int64")
    out["train_tokens"] = tokens
    dl = (_numeric(df, "deadline_s", integer=False, required=False, low=None, strict_low=False)
          if "deadline_s" in df.columns else np.full(len(df), np.nan))
    early = ~np.isnan(dl) & (dl <= out["submit_time_s"].to_numpy())
    if early.any():
        i = int(np.argmax(early))
        raise TrainsimError(_where(df, i, "deadline_s"),
                            f"deadline {dl[i]:g} s is not after the submission at {out['submit_time_s'].iloc[i]:g} s",
                            "deadlines are absolute times after submit_time_s")
    out["deadline_s"] = dl
    w = (_numeric(df, "weight", integer=False, required=False, low=0, strict_low=True)
         if "weight" in df.columns else np.full(len(df), np.nan))
    out["weight"] = np.where(np.isnan(w), 1.0, w)
    out["tenant"] = df["tenant"].fillna("default").astype(str) if "tenant" in df.columns else "default"
    out["pool"] = (df["pool"].astype(object).where(df["pool"].notna(), None) if "pool" in df.columns
                   else pd.Series([None] * len(df), dtype=object))
    out["plan"] = (df["plan"].astype(object).where(df["plan"].notna(), None) if "plan" in df.columns
                   else pd.Series([None] * len(df), dtype=object))
    for i, text in enumerate(out["plan"]):
        if text is not None:
            parse_plan(str(text), _where(df, i, "plan"))
    out["framework"] = (df["framework"].astype(object).where(df["framework"].notna(), None)
                        if "framework" in df.columns else pd.Series([None] * len(df), dtype=object))
    if "framework" in df.columns:
        from trainsim.spec.framework import load_framework

        for name in dict.fromkeys(x for x in out["framework"] if x is not None):
            try:
                load_framework(str(name))
            except TrainsimError as exc:
                i = int(np.argmax((out["framework"] == name).to_numpy()))
                raise TrainsimError(_where(df, i, "framework"), exc.message, exc.hint) from None
    mn, mx, req = out["min_gpus"], out["max_gpus"], out["requested_gpus"]
    for i in range(len(out)):
        lo = mn.iloc[i]
        hi = mx.iloc[i]
        if lo is not pd.NA and hi is not pd.NA and lo > hi:
            raise TrainsimError(_where(df, i, "min_gpus"), f"min_gpus {lo} exceeds max_gpus {hi}", "swap them")
        if lo is not pd.NA and req.iloc[i] < lo:
            raise TrainsimError(_where(df, i, "requested_gpus"), "is below min_gpus", "raise it or lower min_gpus")
        if hi is not pd.NA and req.iloc[i] > hi:
            raise TrainsimError(_where(df, i, "requested_gpus"), "is above max_gpus", "lower it or raise max_gpus")
    if check_models:
        from trainsim.spec.presets import load_model

        for name in dict.fromkeys(out["model"]):
            try:
                load_model(name)
            except TrainsimError as exc:
                i = int(np.argmax((out["model"] == name).to_numpy()))
                raise TrainsimError(_where(df, i, "model"), exc.message, exc.hint) from None
    order = np.argsort(out["submit_time_s"].to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True)


def load_trace(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Read (if a path) and validate a trace."""
    df = source if isinstance(source, pd.DataFrame) else read_trace_file(source)
    return validate_trace(df)


def job_specs(trace: pd.DataFrame, tokens_per_iteration: Any = None) -> list[JobSpec]:
    """The validated trace as :class:`JobSpec` records; ``train_tokens`` rows become whole iterations (ceil).

    ``tokens_per_iteration(row) -> int`` resolves the token count of an iteration (global batch × sequence).
    """
    out: list[JobSpec] = []
    for i, r in enumerate(records(trace)):
        seq = None if r.seq_length is pd.NA or r.seq_length is None else int(r.seq_length)
        if r.iterations is pd.NA or r.iterations is None:
            tpi = tokens_per_iteration(r) if tokens_per_iteration else int(r.global_batch_size) * (seq or 2048)
            iters = max(1, math.ceil(float(r.train_tokens) / tpi))
        else:
            iters = int(r.iterations)
        plan = parse_plan(str(r.plan), f"trace row {i + 1} (job_id {r.job_id}), plan") if r.plan else None
        out.append(JobSpec(
            index=i, job_id=str(r.job_id), submit_time_s=float(r.submit_time_s), model=str(r.model),
            global_batch_size=int(r.global_batch_size), seq_length=seq, iterations=iters,
            deadline_s=None if math.isnan(r.deadline_s) else float(r.deadline_s),
            requested_gpus=int(r.requested_gpus),
            min_gpus=None if r.min_gpus is pd.NA else int(r.min_gpus),
            max_gpus=None if r.max_gpus is pd.NA else int(r.max_gpus),
            weight=float(r.weight), tenant=str(r.tenant), pool=None if r.pool is None else str(r.pool), plan=plan,
            framework=None if getattr(r, "framework", None) is None else str(r.framework)))
    return out


def write_trace(trace: pd.DataFrame, path: str | Path) -> None:
    """Write a trace as CSV or Parquet (by extension), atomically."""
    from trainsim.io.atomic import atomic_path

    with atomic_path(path) as tmp:
        if str(path).lower().endswith((".parquet", ".pq")):
            trace.to_parquet(tmp, index=False)
        else:
            trace.to_csv(tmp, index=False, float_format="%.6f")
