"""Chrome / Perfetto trace writer (JSON "Trace Event Format").

:func:`write_chrome_trace` turns a table of slices into complete events (``ph: "X"``, microseconds), one
process per ``pid`` (a GPU) and one thread per ``tid`` (a stream), with ``process_name``/``thread_name`` (and
sort-index) metadata events. Every column besides ``pid, tid, name, ts_s, dur_s, cat`` becomes an event
argument (missing values are left out).

Slices on one thread must never overlap, or viewers draw them wrongly. The writer guarantees it: within a
thread, slices sorted by start are checked against the end of the previous ones; an overlap up to
``tolerance_s`` (clock jitter: measured kernels often overlap their predecessor by tens of microseconds) is
removed by starting the later slice at the earlier one's end (its duration shrinks by the same amount, and
``trimmed_us`` is added to its args when at least 1 ns); a larger overlap moves the slice to an extra thread
named ``"<thread> (overlap k)"`` (``overlap="lanes"``, the default) or raises (``overlap="error"``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.io.atomic import atomic_path

_REQUIRED = ("pid", "tid", "name", "ts_s", "dur_s")
_RESERVED = (*_REQUIRED, "cat")


@dataclasses.dataclass(frozen=True)
class ChromeTraceInfo:
    """What :func:`write_chrome_trace` wrote."""

    events: int  #: complete events (slices)
    trimmed: int  #: slices shortened to remove an overlap within ``tolerance_s``
    extra_threads: int  #: overlap threads added


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_chrome_trace(
    events: pd.DataFrame,
    path: str | os.PathLike[str],
    process_names: Mapping[int, str] | None = None,
    thread_names: Mapping[int, str] | Mapping[tuple[int, int], str] | None = None,
    *,
    process_sort_index: Mapping[int, int] | None = None,
    overlap: Literal["lanes", "error"] = "lanes",
    tolerance_s: float = 1e-4,
    metadata: Mapping[str, Any] | None = None,
) -> ChromeTraceInfo:
    """Write slices as a Chrome/Perfetto JSON trace (gzip-compressed when ``path`` ends with ``.gz``).

    ``events``: columns ``pid`` (int), ``tid`` (int), ``name`` (str), ``ts_s`` and ``dur_s`` (seconds),
    optional ``cat``, any other columns as args. ``thread_names`` maps a tid (for every process) or a ``(pid,
    tid)`` pair to a name. See the module docstring for overlap handling.
    """
    if not isinstance(events, pd.DataFrame):
        raise TrainsimError("events", f"expected a DataFrame, got {type(events).__name__}", "pass a table of slices")
    missing = [c for c in _REQUIRED if c not in events.columns]
    if missing:
        raise TrainsimError("events", f"missing column(s) {missing}", f"provide {list(_REQUIRED)}")
    if overlap not in ("lanes", "error"):
        raise TrainsimError("overlap", f"unknown policy {overlap!r}", "use 'lanes' or 'error'")
    if not tolerance_s >= 0:
        raise TrainsimError("tolerance_s", f"must be >= 0, got {tolerance_s}", "use e.g. 1e-4")
    ts = pd.to_numeric(events["ts_s"], errors="coerce").to_numpy(dtype=np.float64)
    dur = pd.to_numeric(events["dur_s"], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(ts) | ~np.isfinite(dur) | (dur < 0))
    if len(bad):
        raise TrainsimError(
            "events",
            f"non-finite time or negative duration at rows {bad[:5].tolist()}",
            "slices need finite ts_s and dur_s >= 0",
        )
    try:
        pid = events["pid"].to_numpy(dtype=np.int64)
        tid = events["tid"].to_numpy(dtype=np.int64)
    except (TypeError, ValueError):
        raise TrainsimError("events", "pid and tid must be integers", "number processes and threads") from None

    order = np.lexsort((-dur, ts, tid, pid))
    lane = np.zeros(len(order), dtype=np.int64)
    trim = np.zeros(len(order))
    # fast check: does any slice start before the running max end of its thread?
    p_o, t_o, s_o, e_o = pid[order], tid[order], ts[order], ts[order] + dur[order]
    new_thread = np.ones(len(order), dtype=bool)
    new_thread[1:] = (p_o[1:] != p_o[:-1]) | (t_o[1:] != t_o[:-1])
    run_end = pd.Series(e_o).groupby(np.cumsum(new_thread)).cummax().to_numpy()
    prev_end = np.where(new_thread, -np.inf, np.concatenate(([-np.inf], run_end[:-1])))
    if (s_o < prev_end).any():
        lane, trim = _assign_lanes(p_o, t_o, s_o, e_o, new_thread, tolerance_s, overlap)
    n_trimmed = int((trim >= 1e-9).sum())

    # new tids for overlap lanes
    tid_out = t_o.copy()
    extra: dict[tuple[int, int, int], int] = {}
    if lane.any():
        next_tid = int(tid.max()) + 1
        for i in np.flatnonzero(lane):
            k = (int(p_o[i]), int(t_o[i]), int(lane[i]))
            if k not in extra:
                extra[k] = next_tid
                next_tid += 1
            tid_out[i] = extra[k]

    arg_cols = [c for c in events.columns if c not in _RESERVED]
    names = events["name"].astype(str).to_numpy()[order].tolist()
    cats = events["cat"].astype(str).to_numpy()[order].tolist() if "cat" in events.columns else names
    arg_values = {c: events[c].to_numpy()[order].tolist() for c in arg_cols}
    # round start and end (not start and duration) to the nanosecond, so rounding never creates an overlap
    ts_r = np.round((s_o + trim) * 1e6, 3)
    end_r = np.maximum(np.round(e_o * 1e6, 3), ts_r)
    ts_us = ts_r.tolist()
    dur_us = np.round(end_r - ts_r, 3).tolist()
    trim_us = np.round(trim * 1e6, 3).tolist()
    p_l, t_l = p_o.tolist(), tid_out.tolist()
    out: list[dict[str, Any]] = []
    for i in range(len(order)):
        args = {c: _py(arg_values[c][i]) for c in arg_cols}
        args = {k: v for k, v in args.items() if v is not None}
        if trim_us[i] >= 0.001:
            args["trimmed_us"] = trim_us[i]
        out.append(
            {
                "name": names[i],
                "cat": cats[i],
                "ph": "X",
                "pid": p_l[i],
                "tid": t_l[i],
                "ts": ts_us[i],
                "dur": dur_us[i],
                "args": args,
            }
        )

    meta_events: list[dict[str, Any]] = []
    threads = sorted({(int(a), int(b)) for a, b in zip(p_o, t_o, strict=True)})
    for p in sorted({a for a, _ in threads}):
        pname = (process_names or {}).get(p, f"process {p}")
        meta_events.append({"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": pname}})
        if process_sort_index is not None and p in process_sort_index:
            meta_events.append(
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "pid": p,
                    "tid": 0,
                    "args": {"sort_index": int(process_sort_index[p])},
                }
            )
    tnames: Mapping[Any, str] = thread_names or {}
    for p, t in threads:
        tname = tnames.get((p, t), tnames.get(t, f"thread {t}"))  # type: ignore[call-overload]
        meta_events.append({"name": "thread_name", "ph": "M", "pid": p, "tid": t, "args": {"name": tname}})
        meta_events.append(
            {"name": "thread_sort_index", "ph": "M", "pid": p, "tid": t, "args": {"sort_index": t * 1000}}
        )
    for (p, t, k), new in sorted(extra.items()):
        tname = tnames.get((p, t), tnames.get(t, f"thread {t}"))  # type: ignore[call-overload]
        meta_events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": p,
                "tid": new,
                "args": {"name": f"{tname} (overlap {k})"},
            }
        )
        meta_events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": p,
                "tid": new,
                "args": {"sort_index": t * 1000 + k},
            }
        )

    doc: dict[str, Any] = {"traceEvents": meta_events + out, "displayTimeUnit": "ms"}
    if metadata:
        doc["otherData"] = {str(k): _py(v) for k, v in metadata.items()}
    p_out = Path(path)
    p_out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":"))
    with atomic_path(p_out) as tmp:
        if p_out.name.endswith(".gz"):
            with gzip.open(tmp, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            tmp.write_text(text)
    return ChromeTraceInfo(events=len(out), trimmed=n_trimmed, extra_threads=len(extra))


def _assign_lanes(
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    new_thread: np.ndarray,
    tol: float,
    policy: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy lane assignment within each thread (inputs sorted by thread, then start)."""
    lane = np.zeros(len(start), dtype=np.int64)
    trim = np.zeros(len(start))
    lane_end: list[float] = []
    for i in range(len(start)):
        if new_thread[i]:
            lane_end = []
        s, e = float(start[i]), float(end[i])
        for k, le in enumerate(lane_end):
            if s >= le:
                lane[i] = k
                lane_end[k] = e
                break
            if s >= le - tol:
                trim[i] = min(le - s, e - s)
                lane[i] = k
                lane_end[k] = max(e, le)
                break
        else:
            if lane_end and policy == "error":
                raise TrainsimError(
                    "events",
                    f"slices overlap on pid {int(pid[i])}, tid {int(tid[i])} at "
                    f"{s:.6f} s (by {(min(lane_end) - s) * 1e6:.1f} us)",
                    "put concurrent slices on different threads, or use overlap='lanes'",
                )
            lane[i] = len(lane_end)
            lane_end.append(e)
    return lane, trim
