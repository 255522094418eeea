"""The published measurements (``trainsim/data/published/measurements.csv``) as jobs with a measured time.

Each row becomes a :class:`~trainsim.spec.job.Job` run by the framework profile of its source (``framework`` in
:data:`SOURCE_DEFAULTS`: the software stack is a fact of the source, not a fitted knob). Empty cells get the
defaults of the row's source, chosen here once and documented in :data:`SOURCE_DEFAULTS` and docs/VALIDATION.md:

- ``sc21``/``kort`` (Megatron-LM 2021-22 on DGX-A100, profile ``megatron-lm-2021``; ``@3.0`` for the 2022 code of
  ``kort``, whose input-gradient all-reduce runs under the weight-gradient GEMM): core attention on the s²
  scores with the fused scale-mask-softmax kernel (FlashAttention did not exist yet),
  GELU MLP with biases and dropout, learned positions, tied embeddings, fp16, no distributed optimizer, blocking
  pipeline send/recv (the interleaved schedule's P2P overlap came with Megatron-Core). SC'21 rows
  with ``DDP impl=torch`` overlap the gradient all-reduce with backward (PyTorch DDP buckets); ``impl=local`` does not.
- ``mlm24`` (Megatron-Core r0.8 on DGX-H100): the README states ``--overlap-grad-reduce --overlap-param-gather
  --tp-comm-overlap``, which require the distributed optimizer and sequence parallelism; bf16 (implied by the MFU /
  TFLOP/s ratio), FlashAttention (Transformer Engine), micro-batch 1, no recomputation, GELU 4h MLP, MHA.
- ``nemo2407`` (NeMo 24.07 on DGX-H100, FP8): NeMo's performance recipes use the distributed optimizer, overlapped
  gradient reduce and parameter gather, sequence parallelism and TP communication overlap when tp > 1, no
  recomputation, FlashAttention, and (Apex distributed Adam, ``grad_sync_dtype: bf16``) 16-bit gradient
  reduction. GPT-3 models use the GPT-2 vocabulary (50257) and GELU; Nemotron-3 uses squared-ReLU
  (not gated), rotary positions, no biases and a 256000 vocabulary; Llama uses SwiGLU/RMSNorm/rotary.

Rows of any other source (any CSV or Parquet file in the same schema: ``trainsim validate --measurements PATH``) are
turned into jobs by :mod:`trainsim.validation.rows` with the documented rules of
:mod:`trainsim.validation.row_rules` (framework, system and model family) and the framework's defaults for empty
cells; a row that cannot be predicted is kept with its reason (:class:`SkippedRow`), never dropped silently.

Measured iteration time (:func:`measured_iteration_time`), first available of: ``measured_iter_s``; tokens/s per GPU
(``B·s / (tokens/s · GPUs)``); TFLOP/s per GPU with the source's own FLOP formula (SC'21 Eq. 3, which counts the
recompute forward, for ``sc21`` rows and for stacks whose throughput calculators report it: the Megatron-LM code of
2021, Megatron-DeepSpeed, DeepSpeed — :data:`trainsim.validation.row_rules.EQ3_FRAMEWORKS`; every other source with
the model-FLOP formula of the dataset README, the FFN term of a mixture-of-experts model counting its top-k experts);
``measured_mfu`` (a fraction, or a percentage when above 1) times the GPU's dense 16-bit peak (TF32 for fp32 runs)
with the model-FLOP formula: MFU is quoted against the 16-bit peak even for FP8 runs (PaLM's definition, used by the
Llama 3 paper and by Megatron-Core's and NeMo's reported model TFLOP/s), so FP8 rows are not divided by the FP8 peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.spec.job import Job
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import load_system
from trainsim.spec.system import System
from trainsim.spec.training import Training
from trainsim.validation.row_rules import notes_flags, stated_vpp

SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "sc21": {"framework": "megatron-lm-2021", "precision": "fp16", "zero": 0, "sp": False, "recompute": "none",
             "overlap_p2p_comm": False},
    "kort": {"framework": "megatron-lm-2021@3.0", "precision": "fp16", "zero": 0, "sp": False, "recompute": "none",
             "overlap_p2p_comm": False},
    "mlm24": {"framework": "megatron-core", "precision": "bf16", "zero": 1, "sp": True, "recompute": "none",
              "micro_batch": 1, "overlap_grad_reduce": True, "overlap_param_gather": True, "tp_comm_overlap": True},
    "nemo2407": {"framework": "nemo", "precision": "fp8", "zero": 1, "sp": True, "recompute": "none",
                 "overlap_grad_reduce": True, "overlap_param_gather": True, "tp_comm_overlap": True,
                 "grad_reduce_in_fp32": False},
}
SYSTEM_FOR_GPU = {"A100-SXM4-80GB": "dgx-a100", "H100-SXM5-80GB": "dgx-h100"}
GPT2_VOCAB = 50257
NEMOTRON_VOCAB = 256000
#: Columns every measurements file must have (the others of the schema may be absent: empty cells).
REQUIRED_COLUMNS = ("id", "model", "L", "h", "heads", "seq", "global_batch", "gpu", "num_gpus")
#: Measured columns, in the order the iteration time is derived from them; a file needs at least one.
MEASURED_COLUMNS = ("measured_iter_s", "measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu", "measured_mfu")
SCHEMA_HINT = "use the columns of shared/data/published/README.md (docs/VALIDATION.md)"


@dataclass(frozen=True)
class Measurement:
    """One published run: its job and measured iteration time (``assumptions``: how empty cells were filled)."""

    id: str
    source: str
    job: Job
    measured_iter_s: float
    notes: str
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkippedRow:
    """A row that describes no configuration trainsim can predict, with the one-line reason."""

    id: str
    source: str
    reason: str


@dataclass(frozen=True)
class MeasurementTable:
    """Every row of a measurements file: the predictable ones and the others with their reasons."""

    path: str | None  # None: the packaged table
    rows: tuple[Measurement, ...]
    skipped: tuple[SkippedRow, ...] = ()


class RowError(ValueError):
    """A row that cannot be turned into a job (reported with the row, never raised to the user)."""


def _source(row_id: str) -> str:
    return row_id.split("_", 1)[0]


def _val(row: pd.Series, key: str) -> Any:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    return v


def _model(row: pd.Series, source: str) -> Model:
    name = str(row["model"])
    lower = name.lower()
    h = int(row["h"])
    heads = int(row["heads"])
    kv = _val(row, "kv_heads")
    ffn = _val(row, "ffn")
    vocab = _val(row, "vocab")
    fields: dict[str, Any] = {
        "name": name, "num_layers": int(row["L"]), "hidden_size": h, "num_attention_heads": heads,
        "num_query_groups": int(kv) if kv is not None else None, "seq_length": int(row["seq"]),
    }
    if "llama" in lower:
        fields |= {"swiglu": True, "normalization": "RMSNorm", "position_embedding_type": "rope",
                   "untie_embeddings_and_output_weights": True, "add_bias_linear": False,
                   "hidden_dropout": 0.0, "attention_dropout": 0.0}
    elif "nemotron" in lower:
        fields |= {"swiglu": False, "activation": "squared_relu", "position_embedding_type": "rope",
                   "untie_embeddings_and_output_weights": True, "add_bias_linear": False, "hidden_dropout": 0.0,
                   "attention_dropout": 0.0}
        vocab = vocab or NEMOTRON_VOCAB
    elif source in ("mlm24", "nemo2407"):
        fields |= {"hidden_dropout": 0.0, "attention_dropout": 0.0}
    fields["ffn_hidden_size"] = int(ffn) if ffn is not None else 4 * h
    fields["vocab_size"] = int(vocab) if vocab is not None else GPT2_VOCAB
    return Model(**fields)


def parse_number(text: str) -> float:
    """A number written in a cell: thousands separators and a trailing ``%`` (a fraction) allowed."""
    s = text.strip().replace(",", "").replace("_", "")
    return float(s[:-1]) / 100 if s.endswith("%") else float(s)


def _number(row: pd.Series, key: str) -> float | None:
    v = _val(row, key)
    if v is None:
        return None
    try:
        x = parse_number(v) if isinstance(v, str) else float(v)
    except (TypeError, ValueError):
        raise RowError(f"{key}: {v!r} is not a number") from None
    if not math.isfinite(x) or x <= 0:
        raise RowError(f"{key}: {v!r} must be a positive number")
    return x


def model_flops(model: Model, batch: int, seq: int, vocab: float) -> float:
    """Model FLOPs of one iteration as the dataset README counts them (Megatron-Core 2024's formula, no recompute):
    ``12·B·s·l·h²·((1 + g/a + s/h) + (f/h)·m + V/(2·l·h))``, m = 1.5 for SwiGLU; the FFN of a mixture-of-experts
    model counts its top-k experts."""
    layers, h = model.num_layers, model.hidden_size
    a, g = model.num_attention_heads, model.query_groups
    f = model.moe_router_topk * model.expert_ffn_size if model.is_moe else model.ffn_size
    mult = 1.5 if model.swiglu else 1.0
    return 12.0 * batch * seq * layers * h * h * ((1 + g / a + seq / h) + f / h * mult + vocab / (2 * layers * h))


def eq3_flops(model: Model, batch: int, seq: int, vocab: float, recompute: bool = True) -> float:
    """SC'21 Eq. 3, ``24·f·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`` with f = 4 when activations are recomputed (the
    recompute forward counted: hardware FLOPs) and 3 otherwise, whatever the architecture: the convention of the
    SC'21 paper and of the throughput calculators of Megatron-DeepSpeed (``megatron/utils.py``) and DeepSpeed
    (DeepSpeed-Chat ``print_throughput``: ``checkpoint_activations_factor``)."""
    layers, h = model.num_layers, model.hidden_size
    return (24.0 * (4 if recompute else 3)) * batch * seq * layers * h * h * (1 + seq / (6 * h)
                                                                             + vocab / (16 * layers * h))


def mfu_peak(system: System, precision: str) -> float:
    """The MFU denominator per GPU: the dense 16-bit peak (TF32 for fp32 runs), also for FP8 runs; FP16's on a GPU
    without BF16 tensor cores (Volta)."""
    if precision == "fp32":
        return system.gpu.peak_flops.for_dtype("tf32")
    return system.gpu.peak_flops.bf16 or system.gpu.peak_flops.fp16


def measured_iteration_time(row: pd.Series, model: Model, system: System | None = None,
                            precision: str = "bf16", eq3_recompute: bool | None = None) -> float:
    """Iteration time of a row, derived as the dataset README prescribes (module docstring).

    TFLOP/s figures use SC'21 Eq. 3 (:func:`eq3_flops`) for ``sc21`` rows (recompute counted) and whenever
    ``eq3_recompute`` is given (the row's stack reports Eq. 3 FLOPs; ``True``: it recomputed activations), else
    model FLOPs (:func:`model_flops`)."""
    iter_s = _number(row, "measured_iter_s")
    if iter_s is not None:
        return iter_s
    n, b, s = (int(_number(row, k) or 0) for k in ("num_gpus", "global_batch", "seq"))
    tokens = _number(row, "measured_tokens_per_s_per_gpu")
    if tokens is not None:
        return b * s / (tokens * n)
    v = _number(row, "vocab") or float(model.vocab_size)
    tflops = _number(row, "measured_tflops_per_gpu")
    if tflops is not None:
        if eq3_recompute is None and _source(str(row["id"])) == "sc21":
            eq3_recompute = True
        flops = model_flops(model, b, s, v) if eq3_recompute is None else eq3_flops(model, b, s, v, eq3_recompute)
        return flops / (tflops * 1e12 * n)
    mfu = _number(row, "measured_mfu")
    if mfu is None or system is None:
        raise RowError("no measured value: give measured_iter_s, measured_tokens_per_s_per_gpu, "
                       "measured_tflops_per_gpu or measured_mfu")
    mfu = mfu / 100 if mfu > 1 else mfu
    return model_flops(model, b, s, v) / (mfu * mfu_peak(system, precision) * n)


def system_with_overrides(row: pd.Series, system: System) -> System:
    """The system preset with the row's ``gpus_per_node``, ``nic_per_node`` and ``nic_gbps``."""
    node = system.node
    network = system.network
    if _val(row, "gpus_per_node") is not None:
        node = node.replace(gpus_per_node=int(row["gpus_per_node"]))
    if _val(row, "nic_per_node") is not None:
        network = network.replace(nics_per_node=int(row["nic_per_node"]))
    if _val(row, "nic_gbps") is not None:
        network = network.replace(nic_bandwidth=float(row["nic_gbps"]) * 1e9 / 8)
    return system.replace(node=node, network=network)


def legacy_measurement(row: pd.Series) -> Measurement:
    """A row of one of the four packaged sources (:data:`SOURCE_DEFAULTS`), exactly as it was always read."""
    rid = str(row["id"])
    source = _source(rid)
    d = SOURCE_DEFAULTS[source]
    model = _model(row, source)
    system = system_with_overrides(row, load_system(SYSTEM_FOR_GPU[str(row["gpu"])]))
    tp, pp = int(row["tp"]), int(row["pp"])
    notes = str(_val(row, "notes") or "")
    from_notes = stated_vpp(notes_flags(notes), model.num_layers, pp) if _val(row, "vpp") is None else None
    vpp = int(_val(row, "vpp") or from_notes or 1)
    cp = int(_val(row, "cp") or 1)
    sp_cell = _val(row, "sp")
    sp = d["sp"] if sp_cell is None else sp_cell == "on"
    recompute = _val(row, "recompute") or d["recompute"]
    zero_cell = _val(row, "zero")
    zero = d["zero"] if zero_cell is None else (0 if zero_cell == "none" else int(zero_cell))
    precision = _val(row, "precision") or d["precision"]
    overlap_grad = d.get("overlap_grad_reduce", False) or "DDP impl=torch" in notes
    mbs = int(_val(row, "micro_batch") or d.get("micro_batch", 1))
    job = Job(
        model=model,
        system=system,
        parallelism=Parallelism(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=int(row["dp"]), sequence_parallel=sp and tp > 1),
        training=Training(
            micro_batch_size=mbs, global_batch_size=int(row["global_batch"]), seq_length=int(row["seq"]),
            recompute_granularity=recompute, zero_stage=zero, precision=precision,
            overlap_grad_reduce=overlap_grad,
            overlap_param_gather=d.get("overlap_param_gather", False) and zero >= 1,
            tp_comm_overlap=d.get("tp_comm_overlap", False) and sp and tp > 1,
            grad_reduce_in_fp32=d.get("grad_reduce_in_fp32"),
            overlap_p2p_comm=d.get("overlap_p2p_comm", True),
        ),
        num_gpus=int(row["num_gpus"]),
        framework=d["framework"],
    )
    stated = (f"vpp {from_notes} (from the notes)",) if from_notes else ()
    return Measurement(rid, source, job, measured_iteration_time(row, model), notes,
                       (f"source defaults of {source!r} (SOURCE_DEFAULTS)", *stated))


def row_to_measurement(row: pd.Series) -> Measurement:
    """Turn one row into a :class:`Measurement`; raises :class:`RowError` (or ``ValueError``) with the reason."""
    source = _source(str(row["id"]))
    if source in SOURCE_DEFAULTS and str(row.get("gpu")) in SYSTEM_FOR_GPU:
        return legacy_measurement(row)
    from trainsim.validation.rows import generic_measurement

    return generic_measurement(row, source)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    if len(text) > 1 and "validation error" in text[0]:  # pydantic: the field line and the message line
        return f"{text[1].strip()}: {text[2].strip()}" if len(text) > 2 else text[1].strip()
    return text[0]


def table_to_measurements(table: pd.DataFrame, path: str | None) -> MeasurementTable:
    """Turn every row into a :class:`Measurement` or a :class:`SkippedRow` with its reason."""
    rows: list[Measurement] = []
    skipped: list[SkippedRow] = []
    for _, row in table.iterrows():
        rid = str(row["id"])
        try:
            rows.append(row_to_measurement(row))
        except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
            skipped.append(SkippedRow(rid, _source(rid), _one_line(exc)))
    return MeasurementTable(path, tuple(rows), tuple(skipped))


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a measurements CSV or Parquet file and check its columns; one :class:`TrainsimError` per problem."""
    p = Path(path)
    if not p.is_file():
        raise TrainsimError("--measurements", f"no such file: {p}", "give a CSV or Parquet file of measurements")
    try:
        table = pd.read_parquet(p) if p.suffix.lower() in (".parquet", ".pq") else pd.read_csv(p)
    except Exception as exc:  # pandas/pyarrow raise many types for unreadable files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TrainsimError("--measurements", f"cannot read {p} ({first})", "give a CSV or Parquet file") from None
    table = table.rename(columns=lambda c: str(c).strip())
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise TrainsimError(f"--measurements column {missing[0]!r}", f"missing from {p}"
                            + (f" (also {', '.join(missing[1:])})" if len(missing) > 1 else ""),
                            f"add the column; {SCHEMA_HINT}")
    if not any(c in table.columns for c in MEASURED_COLUMNS):
        raise TrainsimError("--measurements column 'measured_iter_s'", f"{p} has no measured column",
                            f"add one of {', '.join(MEASURED_COLUMNS)}")
    if table.empty:
        raise TrainsimError("--measurements", f"{p} has no rows", "give at least one measured run")
    dup = table["id"][table["id"].duplicated()]
    if len(dup):
        raise TrainsimError("--measurements column 'id'", f"id {dup.iloc[0]!r} occurs more than once in {p}",
                            "give every row its own id")
    return table


@cache
def _packaged() -> MeasurementTable:
    path = resources.files("trainsim") / "data" / "published" / "measurements.csv"
    with path.open() as f:
        table = pd.read_csv(f)
    return table_to_measurements(table, None)


def load_table(path: str | Path | None = None) -> MeasurementTable:
    """Every row of a measurements file (default: the packaged published table), predictable or not."""
    if path is None:
        return _packaged()
    return table_to_measurements(read_table(path), str(path))


def load_measurements(path: str | Path | None = None) -> tuple[Measurement, ...]:
    """The predictable rows of a measurements file (default: the packaged table); :func:`load_table` also gives
    the rows that cannot be predicted, with their reasons."""
    return load_table(path).rows
