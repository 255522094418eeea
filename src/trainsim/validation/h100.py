"""The single-H100 training steps measured for this project (``trainsim/data/gpu-h100/measured.jsonl``) as jobs.

Each row is one real training step on one GPU (gradient accumulation over ``num_microbatches``, no communication),
run by the stack named in the row and modelled with that framework profile: ``megatron-core`` rows ran
Megatron-Core's *local* layer spec without Transformer Engine or Apex (profile ``megatron-core-local``),
``hf-transformers`` rows plain ``LlamaForCausalLM`` with SDPA and ``AdamW(fused=True)`` on bf16 parameters
(profile ``hf-transformers``). The model settings are those of ``shared/data/gpu-h100/measure_training.py``:
Megatron GPT rows with LayerNorm, biases, GELU, learned positions, tied embeddings and no dropout; Llama rows with
RMSNorm, SwiGLU, RoPE, no biases, untied embeddings, no dropout. ``recompute: true`` is full recomputation of
every layer (Megatron ``uniform``/1, HF gradient checkpointing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from trainsim.spec.framework import load_framework
from trainsim.spec.job import Job
from trainsim.spec.model import Model
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import load_system
from trainsim.spec.training import Training
from trainsim.validation.measurements import Measurement

FRAMEWORK_OF = {"megatron-core": "megatron-core-local", "hf-transformers": "hf-transformers"}
SOURCE = "h100"
#: Rows whose peak allocation is not their own (shared README caveat): time compared, memory not.
SUSPECT_MEMORY = frozenset({"gpt-1.3b-mbs1"})


@dataclass(frozen=True)
class H100Run:
    """One measured single-GPU step."""

    id: str
    framework: str
    job: Job
    measured_iter_s: float
    peak_alloc_bytes: float
    memory_comparable: bool


def _model(r: dict) -> Model:  # type: ignore[type-arg]
    llama = bool(r["swiglu"])
    fields: dict[str, Any] = dict(name=r["name"], num_layers=r["L"], hidden_size=r["h"], num_attention_heads=r["heads"],
                  num_query_groups=r["kv"], ffn_hidden_size=r["ffn"], vocab_size=r["V"], seq_length=r["seq"],
                  hidden_dropout=0.0, attention_dropout=0.0)
    if llama:
        fields |= dict(swiglu=True, normalization="RMSNorm", position_embedding_type="rope", add_bias_linear=False,
                       untie_embeddings_and_output_weights=True)
    if r["framework"] == "hf-transformers":
        fields["make_vocab_size_divisible_by"] = 1  # transformers does not pad the vocabulary
    return Model(**fields)


def run_of(r: dict) -> H100Run:  # type: ignore[type-arg]
    """The job of one measured line."""
    fw = FRAMEWORK_OF[r["framework"]]
    job = Job(model=_model(r), system=load_system("dgx-h100"), parallelism=Parallelism(),
              training=Training(micro_batch_size=r["mbs"], global_batch_size=r["mbs"] * r["num_microbatches"],
                                seq_length=r["seq"], recompute_granularity="full" if r["recompute"] else "none",
                                precision="bf16"),
              num_gpus=1, framework=load_framework(fw))
    return H100Run(f"h100_{r['name']}", fw, job, float(r["iter_s"]), float(r["peak_alloc_bytes"]),
                   r["name"] not in SUSPECT_MEMORY)


@cache
def load_h100_runs() -> tuple[H100Run, ...]:
    """Every measured single-H100 step shipped with trainsim."""
    path = resources.files("trainsim") / "data" / "gpu-h100" / "measured.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return tuple(run_of(r) for r in rows if "iter_s" in r)


def h100_measurements() -> tuple[Measurement, ...]:
    """The single-H100 runs as :class:`~trainsim.validation.measurements.Measurement` rows (source ``h100``)."""
    return tuple(Measurement(r.id, SOURCE, r.job, r.measured_iter_s, f"framework {r.framework}")
                 for r in load_h100_runs())
