"""Measured cost tables: schema, Parquet I/O, merging, lookup with interpolation, and the measured cost model.

Two kinds of table, each a Parquet file whose key-value metadata holds ``trainsim.table`` (``ops`` or ``comm``) and
``trainsim.schema_version``:

- **Operator tables** (``trainsim profile``): one row per measured operator, keyed exactly like
  :attr:`trainsim.workload.ops.ComputeOp.key` — ``name, phase, kind``, the shape (``batch, m, n, k`` for GEMMs,
  ``attn_*`` for attention, ``bytes`` for elementwise kernels) and ``dtype``. ``time_s`` is the median of the
  repetitions; ``time_mean_s/std/min/max``, ``repetitions``, ``inner`` (calls per timed repetition) and ``warmup``
  describe the spread. ``source`` is ``layer`` (the necessary operators of a job's layer) or ``sweep`` (a grid of
  shapes); ``layout`` is ``fwd`` / ``dgrad`` / ``wgrad`` for GEMMs (the operand layout of ``nn.Linear``'s three
  products). One row of ``kind == "optimizer"`` may give the optimizer step (``params`` parameters in ``time_s``).
  Provenance columns: ``device`` (cuda/cpu), ``device_name`` (as the driver reports it), ``gpu`` (its normalised key,
  see :func:`gpu_key`), ``threads``, ``torch_version``, ``cuda_version``, ``cudnn_version``, ``driver_version``,
  ``hostname``, ``measured_at``, ``builder`` and ``backend`` (how the operator was built and which attention kernel
  ran), ``model``.
- **Collective tables** (``trainsim import-nccl-tests``): one row per message size of an nccl-tests run —
  ``collective`` (trainsim's names), ``nbytes`` (nccl-tests' *size* column: the same convention as
  :attr:`~trainsim.workload.ops.CommOp.nbytes`), ``ranks``, ``nodes``, ``in_place``, ``time_s``, ``algbw`` and
  ``busbw`` (bytes/s), ``count``, ``dtype``, ``redop``, ``wrong``, ``gpu``, ``device_name``, ``nccl_version``,
  ``source``.

Lookup (:class:`MeasuredCostModel`), in this order:

1. **Exact**: an operator whose key equals a row's key takes that row's ``time_s``.
2. **Interpolated** (counted as measured):

   - GEMMs, in a sweep grid of the same ``dtype`` and ``layout``: the log of the throughput (FLOP/s) is interpolated
     multilinearly in ``(log M, log N, log K)`` with ``M = batch · m`` (a batched GEMM has the tiles of one GEMM with
     ``batch`` times the rows), and ``time = FLOPs / throughput``. Only inside the grid, and only where the 8
     surrounding grid points were all measured.
   - Self-attention (``seq_q == seq_kv``), in a sweep grid of the same ``dtype``, phase, head size and causal flag:
     log throughput bilinear in ``(log(batch · heads), log seq)``.
   - Elementwise kernels: rows of the same ``name``, phase and ``dtype`` at two or more sizes (a sweep over sequence
     lengths or micro-batches): ``log time`` linear in ``log bytes`` between the measured sizes.
   - Collectives: rows of the same collective, ``ranks`` and ``nodes`` (for send/recv: the same tier, intra- or
     inter-node, preferring the exact group, else the fewest ranks): ``log time`` linear in ``log bytes`` between the
     measured sizes; above the largest size at that size's bus bandwidth (bandwidth-bound). Out-of-place times are
     used; in-place ones only where a run has no out-of-place column.
3. **Analytic fallback** everywhere else (roofline compute, α-β collectives) with the calibration of the job's GPU.

Tables are named by file, by folder (every table of the right kind in it), or by the name of a profile shipped with
trainsim under ``trainsim/data/profiles/<name>/`` (:func:`packaged_profiles`). Merging: tables of one kind
concatenate; a key present in several tables takes the row of the *last* table given
(re-measure and append to override). All tables must come from one GPU (:func:`gpu_key`), and that GPU must be the
job's: anything else raises :class:`~trainsim.errors.TrainsimError` — times of one GPU say little about another.
Collective tables whose log named no device are accepted for any GPU.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from trainsim.cost.calibration import Calibration, calibration_for
from trainsim.cost.comm import Placement
from trainsim.cost.job_costs import AnalyticCostModel, default_cost_model
from trainsim.errors import TrainsimError
from trainsim.io.atomic import atomic_path
from trainsim.io.frames import as_int, rows_as
from trainsim.workload.ops import CommOp, ComputeOp, GemmLayout

if TYPE_CHECKING:
    from trainsim.spec.job import Job

SCHEMA_VERSION = 1
META_KIND = b"trainsim.table"
META_VERSION = b"trainsim.schema_version"

# column -> pandas dtype. Key columns first.
OP_COLUMNS: dict[str, str] = {
    "name": "string", "phase": "string", "kind": "string", "dtype": "string",
    "batch": "int64", "m": "int64", "n": "int64", "k": "int64",
    "attn_batch": "int64", "attn_heads": "int64", "attn_seq_q": "int64", "attn_seq_kv": "int64",
    "attn_head_dim": "int64", "attn_causal": "bool", "bytes": "int64",
    "role": "string", "layout": "string", "flops": "float64", "params": "int64",
    "time_s": "float64", "time_mean_s": "float64", "time_std_s": "float64", "time_min_s": "float64",
    "time_max_s": "float64", "repetitions": "int64", "inner": "int64", "warmup": "int64",
    "source": "string", "builder": "string", "backend": "string", "model": "string",
    "device": "string", "device_name": "string", "gpu": "string", "threads": "int64",
    "torch_version": "string", "cuda_version": "string", "cudnn_version": "string", "driver_version": "string",
    "hostname": "string", "measured_at": "string",
}
OP_REQUIRED = ("name", "phase", "kind", "dtype", "time_s", "gpu")

COMM_COLUMNS: dict[str, str] = {
    "collective": "string", "nbytes": "int64", "ranks": "int64", "nodes": "int64", "in_place": "bool",
    "time_s": "float64", "algbw": "float64", "busbw": "float64", "count": "int64", "dtype": "string",
    "redop": "string", "wrong": "float64", "gpu": "string", "device_name": "string", "nccl_version": "string",
    "source": "string",
}
COMM_KEY_COLUMNS = ("collective", "nbytes", "ranks", "nodes", "in_place")
COMM_REQUIRED = ("collective", "nbytes", "ranks", "nodes", "time_s")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

_DEFAULTS = {"string": "", "int64": 0, "float64": float("nan"), "bool": False}

# ---- GPU names ----------------------------------------------------------------------------------------------------
_GPU_MODELS = ("gh200", "gb300", "gb200", "b300", "b200", "b100", "h200", "h100", "h800", "h20", "a100", "a800",
               "a30", "a40", "a10g", "a10", "l40s", "l40", "l4", "v100", "t4", "mi355x", "mi325x", "mi300x",
               "mi250x", "mi250", "mi210")
_GPU_RE = re.compile(r"(?<![a-z0-9])(" + "|".join(_GPU_MODELS) + r")(?![a-z0-9])")


def gpu_key(name: str) -> str:
    """Normalised GPU identity used to match tables with a job's GPU.

    The model (``h100``, ``a100``, ``gb200`` ...) plus the form factor when it is not SXM (``-pcie``, ``-nvl``):
    ``"NVIDIA H100 80GB HBM3"`` and the preset ``"H100-SXM5-80GB"`` are both ``h100``; ``"NVIDIA H100 PCIe"`` is
    ``h100-pcie``. Memory size is ignored. CPUs (any name starting with ``cpu``) are ``cpu``; other names are
    lower-cased with non-alphanumeric runs replaced by ``-``. An empty name gives ``""`` (unknown).
    """
    s = name.strip().lower()
    if not s:
        return ""
    if s.startswith("cpu"):
        return "cpu"
    found = _GPU_RE.search(s)
    if not found:
        return re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    key = found.group(1)
    if "pcie" in s:
        key += "-pcie"
    elif re.search(r"(?<![a-z0-9])nvl(?![a-z0-9])", s):
        key += "-nvl"
    return key


# ---- rows, schema, I/O --------------------------------------------------------------------------------------------
def gemm_layout(op: ComputeOp) -> str:
    """Operand layout of a GEMM op: ``fwd``, ``dgrad`` or ``wgrad`` (its typed :class:`GemmLayout`)."""
    return (op.layout or GemmLayout.FWD).value


def _row_layout(name: str) -> str:
    """Layout of a table row written without a ``layout`` column (tables of earlier versions): the operand layout
    their writer encoded in the op name."""
    for layout in (GemmLayout.DGRAD, GemmLayout.WGRAD):
        if name.endswith(f"_{layout.value}"):
            return layout.value
    return GemmLayout.FWD.value


def op_key_columns(op: ComputeOp) -> dict[str, Any]:
    """The key columns of a table row for ``op``."""
    row: dict[str, Any] = {"name": op.name, "phase": op.phase, "kind": op.kind, "dtype": op.dtype, "batch": 0,
                           "m": 0, "n": 0, "k": 0, "attn_batch": 0, "attn_heads": 0, "attn_seq_q": 0,
                           "attn_seq_kv": 0, "attn_head_dim": 0, "attn_causal": False, "bytes": 0,
                           "flops": float(op.flops), "layout": ""}
    if op.kind == "gemm":
        row.update(batch=op.batch, m=op.m, n=op.n, k=op.k, layout=gemm_layout(op))
    elif op.kind == "attention":
        b, h, sq, skv, d, causal = op.attn or (0, 0, 0, 0, 0, False)
        row.update(attn_batch=b, attn_heads=h, attn_seq_q=sq, attn_seq_kv=skv, attn_head_dim=d,
                   attn_causal=bool(causal))
    else:
        row["bytes"] = int(op.bytes)
    return row


class _OpRow(NamedTuple):
    """The columns of an op table that keys and interpolation read (types as in :data:`OP_COLUMNS`)."""

    name: str
    phase: str
    kind: str
    dtype: str
    batch: int
    m: int
    n: int
    k: int
    attn_batch: int
    attn_heads: int
    attn_seq_q: int
    attn_seq_kv: int
    attn_head_dim: int
    attn_causal: bool
    bytes: int
    layout: str
    flops: float
    params: int
    time_s: float
    source: str


def _row_key(r: _OpRow) -> tuple[object, ...]:
    """:attr:`ComputeOp.key` of a table row."""
    if r.kind == "gemm":
        shape: tuple[object, ...] = (int(r.batch), int(r.m), int(r.n), int(r.k))
    elif r.kind == "attention":
        shape = (int(r.attn_batch), int(r.attn_heads), int(r.attn_seq_q), int(r.attn_seq_kv), int(r.attn_head_dim),
                 bool(r.attn_causal))
    else:
        shape = (int(r.bytes),)
    return (str(r.name), str(r.phase), str(r.kind), shape, str(r.dtype))


def normalize(df: pd.DataFrame, kind: str, origin: str = "table") -> pd.DataFrame:
    """Check the required columns, add missing optional ones with defaults, and fix the column types."""
    columns, required = (OP_COLUMNS, OP_REQUIRED) if kind == "ops" else (COMM_COLUMNS, COMM_REQUIRED)
    field_name = "op_costs" if kind == "ops" else "comm_costs"
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TrainsimError(field_name, f"{origin} lacks column(s) {', '.join(missing)}",
                            "give a table written by trainsim profile" if kind == "ops"
                            else "give a table written by trainsim import-nccl-tests")
    out = df.copy()
    for col, dtype in columns.items():
        if col not in out.columns:
            out[col] = _DEFAULTS[dtype]
        elif dtype in ("int64", "bool"):
            out[col] = out[col].fillna(_DEFAULTS[dtype])
        elif dtype == "string":
            out[col] = out[col].fillna("")
    try:
        out = out.astype(columns)
    except (TypeError, ValueError) as exc:
        raise TrainsimError(field_name, f"{origin} has a column of the wrong type ({exc})".replace("\n", " "),
                            "regenerate the table with trainsim") from None
    extra = [c for c in out.columns if c not in columns]
    return out[list(columns) + extra].reset_index(drop=True)


def write_table(df: pd.DataFrame, path: str | Path, kind: str) -> Path:
    """Write a table as Parquet with trainsim's metadata (``kind``: ``ops`` or ``comm``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind not in ("ops", "comm"):
        raise ValueError(f"unknown table kind {kind!r}")
    path = Path(path)
    table = pa.Table.from_pandas(normalize(df, kind), preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[META_KIND] = kind.encode()
    meta[META_VERSION] = str(SCHEMA_VERSION).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            pq.write_table(table.replace_schema_metadata(meta), tmp)
    except OSError as exc:
        raise TrainsimError("out", f"cannot write {path} ({exc})", "choose a writable path") from None
    return path


def table_kind(path: str | Path) -> str:
    """``ops`` or ``comm``: the kind recorded in a table's metadata (guessed from its columns when absent)."""
    import pyarrow.parquet as pq

    schema = _read_schema(path, pq)
    meta = schema.metadata or {}
    if META_KIND in meta:
        return meta[META_KIND].decode()
    names = set(schema.names)
    if {"collective", "nbytes"} <= names:
        return "comm"
    if {"name", "phase", "kind"} <= names:
        return "ops"
    raise TrainsimError("table", f"{path} is not a trainsim cost table", "give a table written by trainsim")


def _read_schema(path: str | Path, pq: Any) -> Any:
    try:
        return pq.read_schema(path)
    except FileNotFoundError:
        raise TrainsimError("table", f"{path} does not exist", "give the path of a Parquet table") from None
    except (OSError, ValueError) as exc:
        raise TrainsimError("table", f"cannot read {path} as Parquet ({exc})".replace("\n", " "),
                            "give a Parquet table written by trainsim") from None


def read_table(path: str | Path, kind: str) -> pd.DataFrame:
    """Read and validate a table of the given kind (``ops`` or ``comm``)."""
    import pyarrow.parquet as pq

    field_name = "op_costs" if kind == "ops" else "comm_costs"
    try:
        found = table_kind(path)
    except TrainsimError as exc:
        raise TrainsimError(field_name, exc.message, exc.hint) from None
    if found != kind:
        names = {"ops": "an operator table (trainsim profile)", "comm": "a collective table (trainsim "
                 "import-nccl-tests)"}
        raise TrainsimError(field_name, f"{path} is {names.get(found, found).split(' (')[0]}",
                            f"give {names[kind]}")
    meta = pq.read_schema(path).metadata or {}
    version = int(meta.get(META_VERSION, b"1"))
    if version > SCHEMA_VERSION:
        raise TrainsimError(field_name, f"{path} has schema version {version}, newer than this trainsim's "
                            f"{SCHEMA_VERSION}", "upgrade trainsim")
    return normalize(pd.read_parquet(path), kind, str(path))


def _as_frame(table: str | Path | pd.DataFrame, kind: str) -> tuple[pd.DataFrame, str]:
    if isinstance(table, pd.DataFrame):
        return normalize(table, kind), "a table"
    return read_table(table, kind), str(table)


def merge_tables(tables: Sequence[str | Path | pd.DataFrame], kind: str) -> pd.DataFrame:
    """Merge tables of one kind and one GPU; for a key in several tables the last table's rows win."""
    field_name = "op_costs" if kind == "ops" else "comm_costs"
    frames: list[pd.DataFrame] = []
    gpus: dict[str, str] = {}
    for i, t in enumerate(tables):
        df, origin = _as_frame(t, kind)
        for g in sorted(set(df["gpu"]) - {""}):
            gpus.setdefault(g, origin)
        frames.append(df.assign(_order=i))
    if len(gpus) > 1:
        (g1, o1), (g2, o2) = list(gpus.items())[:2]
        raise TrainsimError(field_name, f"tables from different GPUs: {o1} is {g1}, {o2} is {g2}",
                            "merge only tables measured on one GPU type")
    if not frames:
        return normalize(pd.DataFrame({c: [] for c in (OP_REQUIRED if kind == "ops" else COMM_REQUIRED)}), kind)
    df = pd.concat(frames, ignore_index=True)
    if kind == "ops":
        df["_key"] = pd.Series([_row_key(r) if r.kind != "optimizer" else ("optimizer", str(r.dtype), int(r.params))
                                for r in rows_as(df, _OpRow)], index=df.index, dtype=object)
        keep = df.groupby("_key", sort=False)["_order"].transform("max") == df["_order"]
        df = df[keep].drop(columns=["_key"])
    else:
        keys = list(COMM_KEY_COLUMNS)
        keep = df.groupby(keys, sort=False)["_order"].transform("max") == df["_order"]
        df = df[keep]
    return df.drop(columns=["_order"]).reset_index(drop=True)


# ---- interpolation helpers ----------------------------------------------------------------------------------------
def _bracket(axis: Sequence[float], x: float) -> tuple[int, int, float] | None:
    """Indices ``(i, j)`` around ``x`` in a sorted axis and the weight of ``j``; ``None`` outside."""
    eps = 1e-9
    if x < axis[0] - eps or x > axis[-1] + eps:
        return None
    j = bisect_left(axis, x - eps)
    if j < len(axis) and abs(axis[j] - x) <= eps:
        return j, j, 0.0
    i = j - 1
    return i, j, (x - axis[i]) / (axis[j] - axis[i])


@dataclass
class _Grid:
    """Log-throughput on a regular grid of log-coordinates (NaN where not measured)."""

    axes: list[list[float]]
    values: np.ndarray

    @classmethod
    def build(cls, points: dict[tuple[float, ...], list[float]]) -> _Grid:
        dims = len(next(iter(points)))
        axes = [sorted({p[d] for p in points}) for d in range(dims)]
        values = np.full([len(a) for a in axes], np.nan)
        for p, vals in points.items():
            idx = tuple(axes[d].index(p[d]) for d in range(dims))
            values[idx] = float(np.median(vals))
        return cls(axes, values)

    def __call__(self, point: Sequence[float]) -> float | None:
        brackets = []
        for axis, x in zip(self.axes, point, strict=True):
            b = _bracket(axis, x)
            if b is None:
                return None
            brackets.append(b)
        total = 0.0
        for corner in range(1 << len(brackets)):
            idx, w = [], 1.0
            for d, (i, j, t) in enumerate(brackets):
                upper = (corner >> d) & 1
                if i == j and upper:
                    w = 0.0
                    break
                idx.append(j if upper else i)
                w *= (t if upper else 1.0 - t) if i != j else 1.0
            if w == 0.0:
                continue
            v = float(self.values[tuple(idx)])
            if math.isnan(v):
                return None
            total += w * v
        return total


@dataclass
class _Series:
    """``log time`` as a piecewise-linear function of ``log size`` (sizes sorted, unique)."""

    log_sizes: list[float]
    log_times: list[float]

    @classmethod
    def build(cls, pairs: Iterable[tuple[float, float]]) -> _Series:
        by_size: dict[float, list[float]] = {}
        for size, t in pairs:
            if size > 0 and t > 0:
                by_size.setdefault(size, []).append(t)
        sizes = sorted(by_size)
        return cls([math.log(s) for s in sizes], [math.log(float(np.median(by_size[s]))) for s in sizes])

    def inside(self, size: float) -> float | None:
        if len(self.log_sizes) < 2 or size <= 0:
            return None
        b = _bracket(self.log_sizes, math.log(size))
        if b is None:
            return None
        i, j, t = b
        return math.exp(self.log_times[i] * (1 - t) + self.log_times[j] * t)


# ---- measured operator times --------------------------------------------------------------------------------------
@dataclass
class OpTimes:
    """Operator times from merged operator tables: exact keys, sweep grids, per-name size series."""

    exact: dict[tuple[object, ...], float] = field(default_factory=dict)
    gemm_grids: dict[tuple[str, str], _Grid] = field(default_factory=dict)
    attention_grids: dict[tuple[str, str, int, bool], _Grid] = field(default_factory=dict)
    series: dict[tuple[str, str, str], _Series] = field(default_factory=dict)
    optimizer_s_per_param: float | None = None
    optimizer_dtype: str = ""
    gpu: str = ""

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> OpTimes:
        out = cls()
        gpus = sorted(set(df["gpu"]) - {""})
        out.gpu = gpus[0] if gpus else ""
        gemm_pts: dict[tuple[str, str], dict[tuple[float, ...], list[float]]] = {}
        attn_pts: dict[tuple[str, str, int, bool], dict[tuple[float, ...], list[float]]] = {}
        sizes: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        opt: dict[str, list[tuple[int, float]]] = {}
        for r in rows_as(df, _OpRow):
            t = float(r.time_s)
            if not (t > 0 and math.isfinite(t)):
                continue
            if r.kind == "optimizer":
                if r.params > 0:
                    opt.setdefault(str(r.dtype), []).append((int(r.params), t))
                continue
            out.exact[_row_key(r)] = t
            flops = float(r.flops)
            if r.kind == "gemm" and r.source == "sweep" and flops > 0 and min(r.batch, r.m, r.n, r.k) > 0:
                p = (math.log(r.batch * r.m), math.log(r.n), math.log(r.k))
                layout = str(r.layout) or _row_layout(str(r.name))
                gemm_pts.setdefault((str(r.dtype), layout), {}).setdefault(p, []).append(math.log(flops / t))
            elif (r.kind == "attention" and r.source == "sweep" and flops > 0 and r.attn_seq_q == r.attn_seq_kv
                  and r.attn_batch * r.attn_heads > 0):
                p = (math.log(r.attn_batch * r.attn_heads), math.log(r.attn_seq_q))
                key = (str(r.dtype), str(r.phase), int(r.attn_head_dim), bool(r.attn_causal))
                attn_pts.setdefault(key, {}).setdefault(p, []).append(math.log(flops / t))
            elif r.kind == "elementwise" and r.bytes > 0:
                sizes.setdefault((str(r.name), str(r.phase), str(r.dtype)), []).append((float(r.bytes), t))
        out.gemm_grids = {k: _Grid.build(v) for k, v in gemm_pts.items()}
        out.attention_grids = {k: _Grid.build(v) for k, v in attn_pts.items()}
        for k, pairs in sizes.items():
            s = _Series.build(pairs)
            if len(s.log_sizes) >= 2:
                out.series[k] = s
        if opt:
            # Megatron keeps fp32 master weights and Adam states: prefer an fp32 measurement
            dtype = "fp32" if "fp32" in opt else sorted(opt)[0]
            params, t = max(opt[dtype])
            out.optimizer_s_per_param = t / params
            out.optimizer_dtype = dtype
        return out

    def lookup(self, op: ComputeOp) -> tuple[float, str] | None:
        """``(seconds, "exact" | "interpolated")`` for ``op``, or ``None`` when the tables do not cover it."""
        t = self.exact.get(op.key)
        if t is not None:
            return t, "exact"
        if op.kind == "gemm" and op.flops > 0:
            grid = self.gemm_grids.get((op.dtype, gemm_layout(op)))
            if grid is not None and min(op.batch, op.m, op.n, op.k) > 0:
                v = grid((math.log(op.batch * op.m), math.log(op.n), math.log(op.k)))
                if v is not None:
                    return op.flops / math.exp(v), "interpolated"
        elif op.kind == "attention" and op.attn is not None and op.flops > 0:
            b, h, sq, skv, d, causal = op.attn
            grid = self.attention_grids.get((op.dtype, op.phase, d, bool(causal)))
            if grid is not None and sq == skv and b * h > 0:
                v = grid((math.log(b * h), math.log(sq)))
                if v is not None:
                    return op.flops / math.exp(v), "interpolated"
        elif op.kind == "elementwise":
            s = self.series.get((op.name, op.phase, op.dtype))
            if s is not None:
                v = s.inside(op.bytes)
                if v is not None:
                    return v, "interpolated"
        return None


# ---- measured collective times ------------------------------------------------------------------------------------
@dataclass
class CommTimes:
    """Collective times from merged nccl-tests tables, per (collective, ranks, nodes)."""

    groups: dict[tuple[str, int, int], _Series] = field(default_factory=dict)
    gpu: str = ""

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> CommTimes:
        out = cls()
        gpus = sorted(set(df["gpu"]) - {""})
        out.gpu = gpus[0] if gpus else ""
        df = df[df["collective"].isin(COLLECTIVES) & (df["time_s"] > 0) & (df["nbytes"] > 0)]
        for (coll, ranks, nodes), g in df.groupby(["collective", "ranks", "nodes"], sort=True):
            oop = g[~g["in_place"]]
            use = oop if len(oop) else g
            s = _Series.build(zip(use["nbytes"].astype(float), use["time_s"].astype(float), strict=True))
            if s.log_sizes:
                out.groups[(str(coll), as_int(ranks), as_int(nodes))] = s
        return out

    def _series_for(self, op: CommOp, place: Placement) -> _Series | None:
        exact = self.groups.get((op.collective, place.size, place.nodes))
        if exact is not None or op.collective != "send_recv":
            return exact
        tier = [(ranks, nodes) for (c, ranks, nodes) in self.groups
                if c == "send_recv" and (nodes > 1) == place.crosses_nodes]
        if not tier:
            return None
        ranks, nodes = min(tier)
        return self.groups[("send_recv", ranks, nodes)]

    def lookup(self, op: CommOp, place: Placement) -> float | None:
        """Seconds for ``op`` over ``place``, or ``None`` (no matching group, or smaller than the smallest size; a
        deduplicating dispatch is not the measured NCCL collective)."""
        if place.size <= 1 or op.nbytes <= 0 or op.network_share != 1.0:
            return None
        s = self._series_for(op, place)
        if s is None:
            return None
        if len(s.log_sizes) == 1:
            return math.exp(s.log_times[0]) if abs(math.log(op.nbytes) - s.log_sizes[0]) < 1e-9 else None
        v = s.inside(op.nbytes)
        if v is not None:
            return v
        if math.log(op.nbytes) > s.log_sizes[-1]:  # bandwidth-bound beyond the largest measured message
            return math.exp(s.log_times[-1]) * op.nbytes / math.exp(s.log_sizes[-1])
        return None


# ---- the measured cost model --------------------------------------------------------------------------------------
@dataclass
class MeasuredCostModel:
    """Measured operator and collective times with the analytic model as fallback (a ``CostModel``).

    ``calibration`` holds the constants that the stage composition reads directly (overlap slowdown, iteration
    overhead). The optimizer step uses the measured seconds per parameter when an operator table carries an
    optimizer row, else the analytic formula.
    """

    fallback: AnalyticCostModel
    calibration: Calibration
    ops: OpTimes | None = None
    comm: CommTimes | None = None
    _compute: dict[ComputeOp, tuple[float, str]] = field(default_factory=dict, repr=False)
    _comm: dict[CommOp, str] = field(default_factory=dict, repr=False)

    def compute(self, op: ComputeOp) -> float:
        """Measured (exact or interpolated) seconds of ``op``, else the roofline time."""
        hit = self._compute.get(op)
        if hit is None:
            found = self.ops.lookup(op) if self.ops is not None else None
            hit = found if found is not None else (self.fallback.compute(op), "analytic")
            self._compute[op] = hit
        return hit[0]

    def host(self, op: ComputeOp) -> float:
        """CPU seconds to issue ``op``: the stack's host model (tables measure GPU time only)."""
        return self.fallback.host(op)

    def collective(self, op: CommOp, place: Placement) -> float:
        """Measured seconds of ``op`` over ``place`` (interpolated in message size), else the α-β time."""
        t = self.comm.lookup(op, place) if self.comm is not None else None
        self._comm[op] = "analytic" if t is None else "measured"
        return self.fallback.collective(op, place) if t is None else t

    def is_measured(self, op: ComputeOp | CommOp) -> bool:
        """Whether the last price of ``op`` came from a table (collectives: the last :meth:`collective` call)."""
        if isinstance(op, ComputeOp):
            self.compute(op)
            return self._compute[op][1] != "analytic"
        return self._comm.get(op) == "measured"

    def optimizer_step(self, params: float) -> float:
        """Measured seconds per parameter × ``params`` when a table has an optimizer row, else analytic."""
        if self.ops is not None and self.ops.optimizer_s_per_param:
            return params * self.ops.optimizer_s_per_param
        return self.fallback.optimizer_step(params)

    def how(self, op: ComputeOp) -> str:
        """``exact``, ``interpolated`` or ``analytic``: where the price of ``op`` came from."""
        self.compute(op)
        return self._compute[op][1]


def packaged_profiles() -> list[str]:
    """Names of the measured tables shipped with trainsim (``trainsim/data/profiles/<name>/``)."""
    root = resources.files("trainsim") / "data" / "profiles"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(f.name.endswith(".parquet")
                                                                        for f in p.iterdir()))


def resolve_tables(specs: Sequence[str | Path | pd.DataFrame], kind: str) -> list[Path | pd.DataFrame]:
    """Table files for ``specs``: files, folders (their ``*.parquet`` tables of ``kind``), or the name of a profile
    shipped with trainsim (:func:`packaged_profiles`); DataFrames pass through."""
    field_name = "op_costs" if kind == "ops" else "comm_costs"
    out: list[Path | pd.DataFrame] = []
    for spec in specs:
        if isinstance(spec, pd.DataFrame):
            out.append(spec)
            continue
        path = Path(spec)
        if not path.exists():
            packaged = resources.files("trainsim") / "data" / "profiles" / str(spec)
            if not packaged.is_dir():
                names = packaged_profiles()
                raise TrainsimError(field_name, f"{spec} does not exist",
                                    "give a table file or folder" + (f", or one of the shipped profiles "
                                                                     f"{', '.join(names)}" if names else ""))
            path = Path(str(packaged))
        if path.is_dir():
            found = [f for f in sorted(path.glob("*.parquet")) if table_kind(f) == kind]
            if not found:
                raise TrainsimError(field_name, f"{spec} holds no {kind} table",
                                    "write tables with trainsim profile / import-nccl-tests")
            out += found
        else:
            out.append(path)
    return out


@dataclass
class CostTables:
    """Loaded (merged and indexed) tables, reusable for many jobs on their GPU."""

    ops: OpTimes | None = None
    comm: CommTimes | None = None

    def model_for(self, job: Job, calibration: Calibration | None = None, kernels: str = "auto") -> MeasuredCostModel:
        """The cost model of ``job``: these tables, and the default model (``calibration`` or the calibration of
        the job's GPU generation, ``kernels`` as in :func:`default_cost_model`) where they do not reach. Raises if
        the tables come from another GPU."""
        base = calibration or calibration_for(job.system.gpu.generation)
        fallback = default_cost_model(job, base, kernels)
        job_gpu = gpu_key(job.system.gpu.name)
        if self.ops is not None:
            _check_gpu("op_costs", self.ops.gpu, job_gpu, job.system.gpu.name)
        if self.comm is not None:
            _check_gpu("comm_costs", self.comm.gpu, job_gpu, job.system.gpu.name)
        return MeasuredCostModel(fallback, base, self.ops, self.comm)


def load_cost_tables(op_tables: Sequence[str | Path | pd.DataFrame] = (),
                     comm_tables: Sequence[str | Path | pd.DataFrame] = ()) -> CostTables:
    """Read, merge and index operator and collective tables (files, folders, shipped profile names, DataFrames)."""
    ops = OpTimes.from_frame(merge_tables(resolve_tables(op_tables, "ops"), "ops")) if op_tables else None
    comm = CommTimes.from_frame(merge_tables(resolve_tables(comm_tables, "comm"), "comm")) if comm_tables else None
    return CostTables(ops, comm)


def measured_cost_model(job: Job, op_tables: Sequence[str | Path | pd.DataFrame] = (),
                        comm_tables: Sequence[str | Path | pd.DataFrame] = (),
                        calibration: Calibration | None = None, kernels: str = "auto") -> MeasuredCostModel:
    """A cost model for ``job`` from measured tables, with the default model (``kernels``) as fallback.

    Each of ``op_tables`` / ``comm_tables`` is a Parquet file, a folder of them, the name of a profile shipped with
    trainsim, or a DataFrame. Operator tables and collective tables are each merged (:func:`merge_tables`); all must
    come from the job's GPU (:func:`gpu_key` of ``job.system.gpu.name``), else
    :class:`~trainsim.errors.TrainsimError`. To price many jobs, load once with :func:`load_cost_tables` and call
    :meth:`CostTables.model_for` per job.
    """
    return load_cost_tables(op_tables, comm_tables).model_for(job, calibration, kernels)


def _check_gpu(field_name: str, table_gpu: str, job_gpu: str, job_gpu_name: str) -> None:
    if table_gpu and table_gpu != job_gpu:
        raise TrainsimError(
            field_name, f"the table was measured on {table_gpu} but the job's GPU is {job_gpu_name} ({job_gpu})",
            f"choose a --system whose GPU is {table_gpu} (a system YAML with that gpu name), or measure on "
            f"{job_gpu}")
