"""Per-operation traces of training jobs: readers, validators and writers.

Two schemas are supported (both documented in ``docs/whatif.md``):

* the **released schema** of the ByteDance straggler traces (OSDI'25): ``meta-<J>.yaml`` with the parallel
  degrees and ``trace-<J>.parquet`` with one row per traced operation, timestamps in seconds relative to the
  start of the step (float32). :func:`write_op_trace` is the canonical writer of this schema; the event
  simulator exports simulated runs through it so that they can be analysed exactly like measured ones;
* trainsim's **rich schema** for future collectors: absolute int64 nanosecond timestamps,
  tensor/context/expert parallel ranks, the stream, an explicit collective group id and sequence number, and
  message bytes, in a single parquet file whose job metadata travels in the parquet key-value metadata.
  :func:`rich_to_released` converts it to the released schema (one traced GPU per (DP rank, stage), as the
  what-if analysis models).

Every invalid input raises :class:`~trainsim.errors.TrainsimError` naming the offending rows and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from trainsim.errors import TrainsimError
from trainsim.io.atomic import atomic_path, write_text_atomic
from trainsim.spec.limits import MAX_OP_SECONDS

# ------------------------------------------------------------------------------------------------------------
# Operation types
# ------------------------------------------------------------------------------------------------------------
FORWARD_COMPUTE = "forward-compute"
BACKWARD_COMPUTE = "backward-compute"
FORWARD_SEND = "forward-send"
FORWARD_RECV = "forward-recv"
BACKWARD_SEND = "backward-send"
BACKWARD_RECV = "backward-recv"
PARAMS_ALL_GATHER = "params-all-gather"
GRADS_REDUCE_SCATTER = "grads-reduce-scatter"
SEPARATE_GRADS_ALL_REDUCE = "separate-grads-all-reduce"
LAYERNORM_GRADS_ALL_REDUCE = "layernorm-grads-all-reduce"
EMBEDDING_GRADS_ALL_REDUCE = "embedding-grads-all-reduce"
OPTIMIZER_CLIP_MAIN_GRAD = "optimizer-clip-main-grad"
OPTIMIZER = "optimizer"
GC = "gc"

COMPUTE_OPTYPES: tuple[str, ...] = (FORWARD_COMPUTE, BACKWARD_COMPUTE)
P2P_OPTYPES: tuple[str, ...] = (FORWARD_SEND, FORWARD_RECV, BACKWARD_SEND, BACKWARD_RECV)
DP_COMM_OPTYPES: tuple[str, ...] = (PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER, SEPARATE_GRADS_ALL_REDUCE)
#: Operation types that are communication in nature (idealized with the median in the what-if analysis).
COMM_OPTYPES: tuple[str, ...] = (
    *P2P_OPTYPES,
    *DP_COMM_OPTYPES,
    LAYERNORM_GRADS_ALL_REDUCE,
    EMBEDDING_GRADS_ALL_REDUCE,
    OPTIMIZER_CLIP_MAIN_GRAD,
)
#: All operation types of the released schema, in a stable display order.
OPTYPES: tuple[str, ...] = (
    FORWARD_COMPUTE,
    BACKWARD_COMPUTE,
    FORWARD_SEND,
    FORWARD_RECV,
    BACKWARD_SEND,
    BACKWARD_RECV,
    PARAMS_ALL_GATHER,
    GRADS_REDUCE_SCATTER,
    SEPARATE_GRADS_ALL_REDUCE,
    LAYERNORM_GRADS_ALL_REDUCE,
    EMBEDDING_GRADS_ALL_REDUCE,
    OPTIMIZER_CLIP_MAIN_GRAD,
    OPTIMIZER,
    GC,
)

# ------------------------------------------------------------------------------------------------------------
# Schemas
# ------------------------------------------------------------------------------------------------------------
#: Released schema: column -> dtype written by :func:`write_op_trace` (integers are widened when values do not
#: fit).
RELEASED_SCHEMA: dict[str, str] = {
    "dp_rank": "int8",
    "stage": "int8",
    "rank": "int16",
    "step": "int64",
    "optype": "category",
    "start_ts": "float32",
    "duration": "float32",
    "seq_id": "int32",
    "mc": "int8",
    "gmc": "int16",
    "mb_id": "int8",
}
_RELEASED_INT = ("dp_rank", "stage", "rank", "step", "seq_id", "mc", "gmc", "mb_id")
_RELEASED_FLOAT = ("start_ts", "duration")

#: Rich schema: column -> dtype. ``group_id`` is "" and ``group_seq`` is -1 for operations outside any
#: collective.
RICH_SCHEMA: dict[str, str] = {
    "step": "int64",
    "rank": "int32",
    "dp_rank": "int32",
    "pp_rank": "int32",
    "tp_rank": "int32",
    "cp_rank": "int32",
    "ep_rank": "int32",
    "stream": "string",
    "optype": "string",
    "start_ns": "int64",
    "end_ns": "int64",
    "mc": "int16",
    "gmc": "int16",
    "mb_id": "int32",
    "group_id": "string",
    "group_seq": "int64",
    "bytes": "int64",
}
_RICH_INT = tuple(c for c, t in RICH_SCHEMA.items() if t.startswith("int"))
_RICH_STR = tuple(c for c, t in RICH_SCHEMA.items() if t == "string")
#: Parquet key-value metadata key holding the job metadata (JSON) of a rich trace.
RICH_META_KEY = b"trainsim.meta"

_MAX_ROWS_SHOWN = 5


# ------------------------------------------------------------------------------------------------------------
# Job metadata
# ------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TraceMeta:
    """Parallel layout of a traced job (the ``meta-<J>.yaml`` of the released schema).

    ``dsp_size`` is the data-sequence-parallel degree of the released traces (replicas that synchronise
    gradients with the data-parallel ranks but are not traced). ``world_size`` is
    ``dp_size * pp_size * tp_size * dsp_size``; 0 (the default) computes it. Use :func:`meta_from_mapping` to
    validate user input.
    """

    trial_name: str
    dp_size: int
    pp_size: int
    tp_size: int = 1
    dsp_size: int = 1
    vpp_size: int = 1
    world_size: int = 0
    run_id: int = 0
    #: expert-parallel coupling (trainsim extension): a label per DP rank; ranks with the same label exchange
    #: tokens in every MoE layer (their compute runs in lock step). Empty: no expert parallelism.
    ep_groups: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.world_size == 0:
            object.__setattr__(self, "world_size", self.dp_size * self.pp_size * self.tp_size * self.dsp_size)

    def to_dict(self) -> dict[str, Any]:
        """The metadata as a plain mapping, in the key order of the released files."""
        return {
            "trial_name": self.trial_name,
            "run_id": self.run_id,
            "dp_size": self.dp_size,
            "dsp_size": self.dsp_size,
            "pp_size": self.pp_size,
            "tp_size": self.tp_size,
            "vpp_size": self.vpp_size,
            "world_size": self.world_size,
            **({"ep_groups": list(self.ep_groups)} if self.ep_groups else {}),
        }


_META_KEYS = ("trial_name", "run_id", "dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size",
              "ep_groups")


def meta_from_mapping(data: Mapping[str, Any], source: str = "meta") -> TraceMeta:
    """Validate a metadata mapping (as read from ``meta-<J>.yaml``) and return a :class:`TraceMeta`."""
    if not isinstance(data, Mapping):
        raise TrainsimError(
            source,
            f"expected a mapping of job metadata, got {type(data).__name__}",
            "write 'key: value' lines such as 'dp_size: 2'",
        )
    unknown = sorted(set(map(str, data)) - set(_META_KEYS))
    if unknown:
        raise TrainsimError(
            f"{source}.{unknown[0]}", f"unknown metadata key(s) {unknown}", f"use only {list(_META_KEYS)}"
        )
    for key in ("trial_name", "dp_size", "pp_size"):
        if key not in data:
            raise TrainsimError(f"{source}.{key}", "missing", f"add '{key}: ...' to the metadata")
    name = data["trial_name"]
    if isinstance(name, bool) or not isinstance(name, str | int) or not str(name).strip():
        raise TrainsimError(
            f"{source}.trial_name",
            f"must be a non-empty string, got {name!r}",
            "name the job, e.g. 'trial_name: ST'",
        )
    values: dict[str, int] = {}
    for key in ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size", "run_id"):
        if key not in data:
            continue
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TrainsimError(f"{source}.{key}", f"must be an integer, got {v!r}", f"write e.g. '{key}: 1'")
        lower = 0 if key == "run_id" else 1
        if int(v) < lower:
            raise TrainsimError(f"{source}.{key}", f"must be >= {lower}, got {v}", "use a positive degree")
        values[key] = int(v)
    product = values["dp_size"] * values["pp_size"] * values.get("tp_size", 1) * values.get("dsp_size", 1)
    if "world_size" in values and values["world_size"] != product:
        raise TrainsimError(
            f"{source}.world_size",
            f"{values['world_size']} != dp_size*pp_size*tp_size*dsp_size = {product}",
            "fix the parallel degrees or the world size",
        )
    values.setdefault("world_size", product)
    groups: tuple[int, ...] = ()
    if data.get("ep_groups") is not None:
        raw = data["ep_groups"]
        if (not isinstance(raw, list | tuple) or len(raw) != values["dp_size"]
                or not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in raw)):
            raise TrainsimError(f"{source}.ep_groups", f"must list one integer label per DP rank ({values['dp_size']})",
                                "e.g. 'ep_groups: [0, 0, 1, 1]' for two expert-parallel groups of two replicas")
        groups = tuple(int(x) for x in raw)
    return TraceMeta(trial_name=str(name), ep_groups=groups, **values)


def read_meta(path: str | os.PathLike[str]) -> TraceMeta:
    """Read and validate a ``meta-<J>.yaml`` file."""
    p = Path(path)
    if not p.is_file():
        raise TrainsimError(
            "meta",
            f"file not found: {p}",
            "pass --meta META.yaml, or put meta-<J>.yaml beside trace-<J>.parquet",
        )
    try:
        data = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TrainsimError(
            str(p),
            f"not valid YAML ({' '.join(str(exc).split())})",
            "write 'key: value' lines, e.g. 'dp_size: 2'",
        ) from None
    return meta_from_mapping(data, source=str(p))


def write_meta(meta: TraceMeta, path: str | os.PathLike[str]) -> None:
    """Write job metadata as ``meta-<J>.yaml`` (the released layout)."""
    write_text_atomic(path, yaml.safe_dump(meta.to_dict(), sort_keys=False))


def meta_path_beside(trace_path: str | os.PathLike[str]) -> Path:
    """The metadata file expected beside a trace: ``meta-<J>.yaml`` for ``trace-<J>.parquet``."""
    p = Path(trace_path)
    name = p.name
    stem = name[: -len(".parquet")] if name.endswith(".parquet") else p.stem
    job = stem[len("trace-") :] if stem.startswith("trace-") else stem
    return p.with_name(f"meta-{job}.yaml")


# ------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------
def _rows(index: pd.Index | np.ndarray, total: int | None = None) -> str:
    idx = list(index[:_MAX_ROWS_SHOWN])
    n = len(index) if total is None else total
    shown = ", ".join(str(int(i)) for i in idx)
    return f"row{'s' if n > 1 else ''} {shown}" + (f" (first {len(idx)} of {n})" if n > len(idx) else "")


def _read_parquet(path: str | os.PathLike[str], field: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise TrainsimError(field, f"file not found: {p}", "check the path of the trace")
    try:
        return pd.read_parquet(p)
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        msg = " ".join(str(exc).split())[:200]
        raise TrainsimError(
            str(p),
            f"cannot read parquet ({type(exc).__name__}: {msg})",
            "regenerate the file; it must be a parquet table",
        ) from None


def _check_int_columns(df: pd.DataFrame, cols: tuple[str, ...], source: str) -> None:
    for c in cols:
        dt = df[c].dtype
        if not pd.api.types.is_integer_dtype(dt) or pd.api.types.is_bool_dtype(dt):
            raise TrainsimError(
                f"{source}.{c}", f"has dtype {dt}, expected an integer dtype", f"write '{c}' as integers"
            )


def _check_no_missing(df: pd.DataFrame, cols: tuple[str, ...], source: str) -> None:
    for c in cols:
        bad = df.index[df[c].isna().to_numpy()]
        if len(bad):
            raise TrainsimError(
                f"{source}.{c}",
                f"missing values (NaN/null) at {_rows(bad)}",
                "drop or repair those operations",
            )


def _is_str_column(s: pd.Series) -> bool:
    if isinstance(s.dtype, pd.CategoricalDtype):
        return bool(all(isinstance(c, str) for c in s.cat.categories))
    if pd.api.types.is_string_dtype(s.dtype):
        return all(type(v) is str for v in s.dropna())
    return False


# ------------------------------------------------------------------------------------------------------------
# Released schema
# ------------------------------------------------------------------------------------------------------------
def read_op_trace(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a released-schema ``trace-<J>.parquet`` as is (validate it with :func:`validate_op_trace`)."""
    return _read_parquet(path, "trace")


def validate_op_trace(df: pd.DataFrame, meta: TraceMeta | None = None, source: str = "trace") -> pd.DataFrame:
    """Validate a released-schema op trace and return a normalized copy.

    The copy holds exactly the released columns with int64 integers, float64 seconds and ``optype`` as str,
    and a fresh 0..n-1 index. Checks: required columns, dtypes, missing values, finite start times, finite
    non-negative durations, known operation types, unique ``(step, rank, optype, seq_id)``, ``seq_id``
    numbering 0..n-1 within each ``(step, rank, optype)``, a consistent rank <-> (dp_rank, stage) mapping and,
    with ``meta``, ranks within the parallel degrees.
    """
    if not isinstance(df, pd.DataFrame):
        raise TrainsimError(source, f"expected a pandas DataFrame, got {type(df).__name__}", "pass a trace table")
    if len(df) == 0:
        raise TrainsimError(source, "the trace has no rows", "trace at least one training step")
    missing = [c for c in RELEASED_SCHEMA if c not in df.columns]
    if missing:
        raise TrainsimError(
            source, f"missing column(s) {missing}", f"the released schema needs {list(RELEASED_SCHEMA)}"
        )
    df = df.reset_index(drop=True)
    _check_int_columns(df, _RELEASED_INT, source)
    for c in _RELEASED_FLOAT:
        dt = df[c].dtype
        if not (pd.api.types.is_float_dtype(dt) or pd.api.types.is_integer_dtype(dt)) or pd.api.types.is_bool_dtype(dt):
            raise TrainsimError(f"{source}.{c}", f"has dtype {dt}, expected float seconds", f"write '{c}' as floats")
    if not _is_str_column(df["optype"]):
        raise TrainsimError(
            f"{source}.optype",
            f"has dtype {df['optype'].dtype}, expected strings",
            f"use operation type names such as {FORWARD_COMPUTE!r}",
        )
    _check_no_missing(df, tuple(RELEASED_SCHEMA), source)

    out = pd.DataFrame({c: df[c].to_numpy(dtype=np.int64) for c in _RELEASED_INT})
    out["optype"] = df["optype"].astype(str).to_numpy(dtype=object)
    for c in _RELEASED_FLOAT:
        out[c] = df[c].to_numpy(dtype=np.float64)
    out = out[list(RELEASED_SCHEMA)]

    bad = out.index[~np.isfinite(out["start_ts"].to_numpy())]
    if len(bad):
        raise TrainsimError(f"{source}.start_ts", f"non-finite start times at {_rows(bad)}", "repair those rows")
    dur = out["duration"].to_numpy()
    bad = out.index[~np.isfinite(dur)]
    if len(bad):
        raise TrainsimError(f"{source}.duration", f"non-finite durations at {_rows(bad)}", "repair those rows")
    bad = out.index[dur < 0]
    if len(bad):
        raise TrainsimError(
            f"{source}.duration",
            f"negative durations at {_rows(bad)}",
            "durations are end - start in seconds and must be >= 0",
        )
    bad = out.index[dur > MAX_OP_SECONDS]
    if len(bad):
        raise TrainsimError(
            f"{source}.duration",
            f"durations over {MAX_OP_SECONDS:g} s at {_rows(bad)}",
            "durations are in seconds (not ms, µs or ns); repair those rows",
        )
    start = out["start_ts"].to_numpy()
    span = (pd.Series(start + dur).groupby(out["step"]).max() - pd.Series(start).groupby(out["step"]).min())
    if len(span) and float(span.max()) > MAX_OP_SECONDS:
        raise TrainsimError(
            f"{source}.start_ts",
            f"step {span.idxmax()} spans {float(span.max()):.3g} s (over {MAX_OP_SECONDS:g} s)",
            "start times are in seconds (not ms, µs or ns) and one step lasts less than a day",
        )
    known = set(OPTYPES)
    unknown_mask = ~out["optype"].isin(known).to_numpy()
    if unknown_mask.any():
        names = sorted(set(out.loc[unknown_mask, "optype"]))[:5]
        raise TrainsimError(
            f"{source}.optype",
            f"unknown operation type(s) {names} at {_rows(out.index[unknown_mask])}",
            f"use one of {list(OPTYPES)}",
        )
    for c, lower in (
        ("dp_rank", 0),
        ("stage", 0),
        ("rank", 0),
        ("seq_id", 0),
        ("mc", -1),
        ("gmc", -1),
        ("mb_id", -1),
    ):
        bad = out.index[out[c].to_numpy() < lower]
        if len(bad):
            raise TrainsimError(f"{source}.{c}", f"values below {lower} at {_rows(bad)}", f"'{c}' must be >= {lower}")

    pairs = out[["rank", "dp_rank", "stage"]].drop_duplicates()
    if pairs["rank"].duplicated().any():
        r = int(pairs.loc[pairs["rank"].duplicated(), "rank"].iloc[0])
        raise TrainsimError(
            f"{source}.rank",
            f"rank {r} appears with several (dp_rank, stage) pairs",
            "a global rank belongs to one DP rank and one stage",
        )
    if pairs.duplicated(["dp_rank", "stage"]).any():
        row = pairs.loc[pairs.duplicated(["dp_rank", "stage"])].iloc[0]
        raise TrainsimError(
            f"{source}.rank",
            f"(dp_rank {int(row.dp_rank)}, stage {int(row.stage)}) is traced on several ranks",
            "trace one GPU (e.g. tensor-parallel rank 0) per DP rank and stage",
        )

    key = ["step", "rank", "optype", "seq_id"]
    dup = out.duplicated(key, keep=False).to_numpy()
    if dup.any():
        raise TrainsimError(
            source,
            f"duplicate (step, rank, optype, seq_id) at {_rows(out.index[dup])}",
            "each operation must appear once; drop the duplicates",
        )
    g = out.groupby(["step", "rank", "optype"], sort=True)["seq_id"]
    agg = g.agg(["min", "max", "count"])
    badg = agg[(agg["min"] != 0) | (agg["max"] + 1 != agg["count"])]
    if len(badg):
        step, rank, optype = badg.index[0]
        raise TrainsimError(
            f"{source}.seq_id",
            f"seq_id of {optype!r} at step {step}, rank {rank} is not numbered 0..n-1 "
            f"({len(badg)} such (step, rank, optype) groups)",
            "number operations of each type 0, 1, 2, ... in start order within a step and rank",
        )

    if meta is not None:
        for c, limit, name in (
            ("dp_rank", meta.dp_size, "dp_size"),
            ("stage", meta.pp_size, "pp_size"),
            ("rank", meta.world_size, "world_size"),
            ("mc", meta.vpp_size, "vpp_size"),
            ("gmc", meta.vpp_size * meta.pp_size, "vpp_size*pp_size"),
        ):
            bad = out.index[out[c].to_numpy() >= limit]
            if len(bad):
                raise TrainsimError(
                    f"{source}.{c}",
                    f"values >= {name} = {limit} at {_rows(bad)}",
                    "the metadata and the trace disagree; fix one of them",
                )
    return out


def _fit_int(values: np.ndarray, preferred: str) -> str:
    for dt in (preferred, "int16", "int32", "int64"):
        info = np.iinfo(dt)
        if np.dtype(dt).itemsize < np.dtype(preferred).itemsize:
            continue
        if len(values) == 0 or (values.min() >= info.min and values.max() <= info.max):
            return dt
    return "int64"


def write_op_trace(
    df: pd.DataFrame,
    meta: TraceMeta | Mapping[str, Any],
    trace_path: str | os.PathLike[str],
    meta_path: str | os.PathLike[str],
) -> None:
    """Write an op trace in the released schema: ``trace-<J>.parquet`` plus ``meta-<J>.yaml``.

    This is the canonical writer (the event simulator exports simulated runs through it). The table is
    validated first; ``start_ts`` is rewritten relative to the earliest operation of its step (the analysis is
    invariant to that shift), rows are sorted by ``(step, rank, optype, seq_id)`` and columns are cast to the
    released dtypes (an integer column is widened when its values do not fit the released width, e.g. more
    than 127 DP ranks).
    """
    m = meta if isinstance(meta, TraceMeta) else meta_from_mapping(meta)
    out = validate_op_trace(df, m)
    out["start_ts"] = out["start_ts"] - out.groupby("step")["start_ts"].transform("min")
    out = out.sort_values(["step", "rank", "optype", "seq_id"], kind="stable").reset_index(drop=True)
    table = pd.DataFrame(index=out.index)
    for c, dt in RELEASED_SCHEMA.items():
        if c == "optype":
            present = set(out["optype"].unique())
            cats = [o for o in OPTYPES if o in present]
            table[c] = pd.Categorical(out[c], categories=cats)
        elif dt.startswith("float"):
            table[c] = out[c].astype(np.dtype(dt))
        else:
            vals = out[c].to_numpy()
            table[c] = vals.astype(_fit_int(vals, dt))
    Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
    Path(meta_path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(trace_path) as tmp:
        table.to_parquet(tmp, index=False)
    write_meta(m, meta_path)


# ------------------------------------------------------------------------------------------------------------
# Rich schema
# ------------------------------------------------------------------------------------------------------------
def validate_rich_trace(df: pd.DataFrame, source: str = "trace") -> pd.DataFrame:
    """Validate a rich-schema trace and return a normalized copy (columns and dtypes of :data:`RICH_SCHEMA`).

    Checks: required columns, integer nanosecond timestamps, ``end_ns >= start_ns``, known operation types,
    non-negative ranks and bytes, and that every pipeline send/receive carrying an explicit collective group
    ``(group_id, group_seq)`` meets exactly one peer of the matching direction (a ``forward-send`` pairs with
    a ``forward-recv``, a ``backward-send`` with a ``backward-recv``).
    """
    if not isinstance(df, pd.DataFrame):
        raise TrainsimError(source, f"expected a pandas DataFrame, got {type(df).__name__}", "pass a trace table")
    if len(df) == 0:
        raise TrainsimError(source, "the trace has no rows", "trace at least one training step")
    missing = [c for c in RICH_SCHEMA if c not in df.columns]
    if missing:
        raise TrainsimError(source, f"missing column(s) {missing}", f"the rich schema needs {list(RICH_SCHEMA)}")
    df = df.reset_index(drop=True)
    _check_int_columns(df, _RICH_INT, source)
    _check_no_missing(df, tuple(c for c in RICH_SCHEMA if c != "group_id"), source)
    for c in _RICH_STR:
        col = df[c].fillna("") if c == "group_id" else df[c]
        if not _is_str_column(col.astype(object) if not isinstance(col.dtype, pd.CategoricalDtype) else col):
            raise TrainsimError(f"{source}.{c}", f"has dtype {df[c].dtype}, expected strings", f"write '{c}' as text")
    out = pd.DataFrame({c: df[c].to_numpy(dtype=np.int64) for c in _RICH_INT})
    for c in _RICH_STR:
        out[c] = (df[c].fillna("") if c == "group_id" else df[c]).astype(str).to_numpy(dtype=object)
    out = out[list(RICH_SCHEMA)]
    bad = out.index[out["end_ns"].to_numpy() < out["start_ns"].to_numpy()]
    if len(bad):
        raise TrainsimError(f"{source}.end_ns", f"end before start at {_rows(bad)}", "end_ns must be >= start_ns")
    bad = out.index[(out["end_ns"].to_numpy() - out["start_ns"].to_numpy()) > MAX_OP_SECONDS * 1e9]
    if len(bad):
        raise TrainsimError(f"{source}.end_ns", f"operations longer than {MAX_OP_SECONDS:g} s at {_rows(bad)}",
                            "timestamps are integer nanoseconds; repair those rows")
    unknown = ~out["optype"].isin(set(OPTYPES)).to_numpy()
    if unknown.any():
        raise TrainsimError(
            f"{source}.optype",
            f"unknown operation type(s) {sorted(set(out.loc[unknown, 'optype']))[:5]} at {_rows(out.index[unknown])}",
            f"use one of {list(OPTYPES)}",
        )
    for c in ("rank", "dp_rank", "pp_rank", "tp_rank", "cp_rank", "ep_rank", "bytes"):
        bad = out.index[out[c].to_numpy() < 0]
        if len(bad):
            raise TrainsimError(f"{source}.{c}", f"negative values at {_rows(bad)}", f"'{c}' must be >= 0")
    p2p = out[out["optype"].isin(P2P_OPTYPES) & out["group_id"].ne("")]
    if len(p2p):
        direction = p2p["optype"].str.split("-").str[0]
        kind = p2p["optype"].str.split("-").str[1]
        grp = pd.DataFrame(
            {"g": p2p["group_id"], "s": p2p["group_seq"], "step": p2p["step"], "d": direction, "k": kind},
            index=p2p.index,
        )
        agg = grp.groupby(["step", "g", "s"], sort=True).agg(
            n=("k", "size"), sends=("k", lambda x: (x == "send").sum()), dirs=("d", "nunique")
        )
        bad = agg[(agg["n"] != 2) | (agg["sends"] != 1) | (agg["dirs"] != 1)]
        if len(bad):
            step, gid, seq = bad.index[0]
            raise TrainsimError(
                f"{source}.group_id",
                f"unmatched pipeline send/receive: group {gid!r} seq {seq} at step {step} has "
                f"{int(bad.iloc[0]['n'])} member(s) ({len(bad)} such groups)",
                "each (group_id, group_seq) of a send/receive must hold one send and its receive",
            )
    return out


def read_rich_trace(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, TraceMeta | None]:
    """Read a rich-schema parquet trace and the job metadata embedded in it (``None`` when absent)."""
    import pyarrow.parquet as pq

    df = _read_parquet(path, "trace")
    meta = None
    try:
        kv = pq.read_schema(path).metadata or {}
    except Exception:  # already readable as a table above; metadata is optional
        kv = {}
    if RICH_META_KEY in kv:
        try:
            data = json.loads(kv[RICH_META_KEY].decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise TrainsimError(
                f"{path}:{RICH_META_KEY.decode()}",
                f"embedded metadata is not JSON ({exc})",
                "rewrite the trace with write_rich_trace",
            ) from None
        meta = meta_from_mapping(data, source=f"{path}:{RICH_META_KEY.decode()}")
    return df, meta


def write_rich_trace(df: pd.DataFrame, meta: TraceMeta | Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a rich-schema trace: validated, sorted by ``(step, rank, start_ns)``, metadata embedded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    m = meta if isinstance(meta, TraceMeta) else meta_from_mapping(meta)
    out = validate_rich_trace(df).sort_values(["step", "rank", "start_ns"], kind="stable").reset_index(drop=True)
    table = pa.Table.from_pandas(
        out.astype({c: t for c, t in RICH_SCHEMA.items() if t != "string"}), preserve_index=False
    )
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[RICH_META_KEY] = json.dumps(m.to_dict()).encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        pq.write_table(table.replace_schema_metadata(schema_meta), tmp)


def rich_to_released(df: pd.DataFrame, tp_rank: int = 0, cp_rank: int = 0, ep_rank: int = 0) -> pd.DataFrame:
    """Convert a rich-schema trace to the released schema (float64 seconds; see :func:`validate_op_trace`).

    Keeps the GPUs with the given tensor/context/expert-parallel ranks (one per (DP rank, stage)), makes
    timestamps relative to the earliest kept operation of each step, and numbers ``seq_id`` in start order
    within each ``(step, rank, optype)``.
    """
    rich = validate_rich_trace(df)
    keep = rich["tp_rank"].eq(tp_rank) & rich["cp_rank"].eq(cp_rank) & rich["ep_rank"].eq(ep_rank)
    rich = rich[keep.to_numpy()]
    if len(rich) == 0:
        raise TrainsimError(
            "trace",
            f"no operations on tp_rank={tp_rank}, cp_rank={cp_rank}, ep_rank={ep_rank}",
            "choose ranks that are present in the trace",
        )
    rich = rich.sort_values(["step", "rank", "optype", "start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    step_start = rich.groupby("step")["start_ns"].transform("min").to_numpy()
    out = pd.DataFrame(
        {
            "dp_rank": rich["dp_rank"].to_numpy(),
            "stage": rich["pp_rank"].to_numpy(),
            "rank": rich["rank"].to_numpy(),
            "step": rich["step"].to_numpy(),
            "optype": rich["optype"].to_numpy(),
            "start_ts": (rich["start_ns"].to_numpy() - step_start) * 1e-9,
            "duration": (rich["end_ns"].to_numpy() - rich["start_ns"].to_numpy()) * 1e-9,
            "seq_id": rich.groupby(["step", "rank", "optype"]).cumcount().to_numpy(),
            "mc": rich["mc"].to_numpy(),
            "gmc": rich["gmc"].to_numpy(),
            "mb_id": rich["mb_id"].to_numpy(),
        }
    )
    return validate_op_trace(out)


# ------------------------------------------------------------------------------------------------------------
# One entry point
# ------------------------------------------------------------------------------------------------------------
def _coerce_meta(meta: TraceMeta | Mapping[str, Any] | str | os.PathLike[str]) -> TraceMeta:
    if isinstance(meta, TraceMeta):
        return meta
    if isinstance(meta, Mapping):
        return meta_from_mapping(meta)
    return read_meta(meta)


def load_trace(
    trace: pd.DataFrame | str | os.PathLike[str],
    meta: TraceMeta | Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> tuple[pd.DataFrame, TraceMeta]:
    """Load and validate a trace of either schema; return the released-schema table and its metadata.

    ``trace`` is a parquet path or a DataFrame; the rich schema is recognised by its ``start_ns`` column.
    ``meta`` is a path, a mapping or a :class:`TraceMeta`; when omitted it is taken from the rich trace's
    embedded metadata, or from ``meta-<J>.yaml`` beside ``trace-<J>.parquet``.
    """
    embedded: TraceMeta | None = None
    if isinstance(trace, pd.DataFrame):
        raw = trace
    else:
        raw, embedded = read_rich_trace(trace)
    rich = "start_ns" in raw.columns
    if meta is not None:
        m = _coerce_meta(meta)
    elif embedded is not None:
        m = embedded
    elif isinstance(trace, pd.DataFrame):
        raise TrainsimError(
            "meta",
            "missing for a trace given as a DataFrame",
            "pass meta= a mapping with trial_name, dp_size, pp_size, ...",
        )
    else:
        beside = meta_path_beside(trace)
        if not beside.is_file():
            raise TrainsimError(
                "meta", f"not given and {beside.name} not found beside {trace}", "pass --meta META.yaml"
            )
        m = read_meta(beside)
    table = rich_to_released(raw) if rich else raw
    return validate_op_trace(table, m), m
