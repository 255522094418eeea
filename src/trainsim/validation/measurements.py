"""The published measurements (``trainsim/data/published/measurements.csv``) as jobs with a measured time.

Each row becomes a :class:`~trainsim.spec.job.Job` run by the framework profile of its source (``framework`` in
:data:`SOURCE_DEFAULTS`: the software stack is a fact of the source, not a fitted knob). Empty cells get the
defaults of the row's source, chosen here once and documented in :data:`SOURCE_DEFAULTS` and docs/VALIDATION.md:

- ``sc21``/``kort`` (Megatron-LM 2021-22 on DGX-A100, profile ``megatron-lm-2021``): core attention on the s²
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

Measured iteration time: ``measured_iter_s`` when given; else from TFLOP/s per GPU with the source's own FLOP
formula (SC'21 Eq. 3 counts the recompute forward; Megatron-Core 2024 counts model FLOPs), or from tokens/s per GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd

from trainsim.spec.job import Job
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import load_system
from trainsim.spec.training import Training

SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "sc21": {"framework": "megatron-lm-2021", "precision": "fp16", "zero": 0, "sp": False, "recompute": "none",
             "overlap_p2p_comm": False},
    "kort": {"framework": "megatron-lm-2021", "precision": "fp16", "zero": 0, "sp": False, "recompute": "none",
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


@dataclass(frozen=True)
class Measurement:
    """One published run: its job and measured iteration time."""

    id: str
    source: str
    job: Job
    measured_iter_s: float
    notes: str


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
        fields |= {"swiglu": False, "position_embedding_type": "rope", "untie_embeddings_and_output_weights": True,
                   "add_bias_linear": False, "hidden_dropout": 0.0, "attention_dropout": 0.0}
        vocab = vocab or NEMOTRON_VOCAB
    elif source in ("mlm24", "nemo2407"):
        fields |= {"hidden_dropout": 0.0, "attention_dropout": 0.0}
    fields["ffn_hidden_size"] = int(ffn) if ffn is not None else 4 * h
    fields["vocab_size"] = int(vocab) if vocab is not None else GPT2_VOCAB
    return Model(**fields)


def measured_iteration_time(row: pd.Series, model: Model) -> float:
    """Iteration time of a row, derived as the dataset README prescribes."""
    if _val(row, "measured_iter_s") is not None:
        return float(row["measured_iter_s"])
    n = int(row["num_gpus"])
    b, s = int(row["global_batch"]), int(row["seq"])
    if _val(row, "measured_tokens_per_s_per_gpu") is not None:
        return b * s / (float(row["measured_tokens_per_s_per_gpu"]) * n)
    tflops = float(row["measured_tflops_per_gpu"])
    layers, h, v = model.num_layers, model.hidden_size, float(row["vocab"])
    if _source(str(row["id"])) == "sc21":
        flops = 96.0 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    else:
        a, g = model.num_attention_heads, model.query_groups
        f = model.ffn_size
        mult = 1.5 if model.swiglu else 1.0
        flops = 12.0 * b * s * layers * h * h * ((1 + g / a + s / h) + f / h * mult + v / (2 * layers * h))
    return flops / (tflops * 1e12 * n)


def row_to_measurement(row: pd.Series) -> Measurement:
    """Turn one CSV row into a :class:`Measurement`."""
    rid = str(row["id"])
    source = _source(rid)
    d = SOURCE_DEFAULTS[source]
    model = _model(row, source)
    system = load_system(SYSTEM_FOR_GPU[str(row["gpu"])])
    node = system.node
    network = system.network
    if _val(row, "gpus_per_node") is not None:
        node = node.replace(gpus_per_node=int(row["gpus_per_node"]))
    if _val(row, "nic_per_node") is not None:
        network = network.replace(nics_per_node=int(row["nic_per_node"]))
    if _val(row, "nic_gbps") is not None:
        network = network.replace(nic_bandwidth=float(row["nic_gbps"]) * 1e9 / 8)
    system = system.replace(node=node, network=network)
    tp, pp = int(row["tp"]), int(row["pp"])
    vpp = int(_val(row, "vpp") or 1)
    cp = int(_val(row, "cp") or 1)
    sp_cell = _val(row, "sp")
    sp = d["sp"] if sp_cell is None else sp_cell == "on"
    recompute = _val(row, "recompute") or d["recompute"]
    zero_cell = _val(row, "zero")
    zero = d["zero"] if zero_cell is None else (0 if zero_cell == "none" else int(zero_cell))
    precision = _val(row, "precision") or d["precision"]
    notes = str(_val(row, "notes") or "")
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
    return Measurement(rid, source, job, measured_iteration_time(row, model), notes)


@cache
def load_measurements() -> tuple[Measurement, ...]:
    """All rows of the packaged published-measurements table."""
    path = resources.files("trainsim") / "data" / "published" / "measurements.csv"
    with path.open() as f:
        table = pd.read_csv(f)
    return tuple(row_to_measurement(row) for _, row in table.iterrows())
