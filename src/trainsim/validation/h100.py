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
from trainsim.validation.row_rules import sdpa_kernel_named, system_for_gpu

FRAMEWORK_OF = {"megatron-core": "megatron-core-local", "hf-transformers": "hf-transformers"}
SOURCE = "h100"
H200_SOURCE = "h200"
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
    source: str = SOURCE

    def measurement(self) -> Measurement:
        """This step as a :class:`~trainsim.validation.measurements.Measurement` row of its source."""
        return Measurement(self.id, self.source, self.job, self.measured_iter_s, f"framework {self.framework}")


def _model(r: dict) -> Model:  # type: ignore[type-arg]
    llama = bool(r["swiglu"])
    fields: dict[str, Any] = dict(name=r["name"], num_layers=r["L"], hidden_size=r["h"], num_attention_heads=r["heads"],
                  num_query_groups=r["kv"], ffn_hidden_size=r["ffn"], vocab_size=r["V"], seq_length=r["seq"],
                  hidden_dropout=0.0, attention_dropout=0.0)
    if llama:
        fields |= dict(swiglu=True, normalization="RMSNorm", position_embedding_type="rope", add_bias_linear=False,
                       untie_embeddings_and_output_weights=True)
    if r.get("num_experts"):  # Megatron-Core MoE: every layer, dropless, aux-loss router
        fields |= dict(num_experts=r["num_experts"], moe_router_topk=r["topk"], moe_ffn_hidden_size=r["moe_ffn"])
    if r["framework"] == "hf-transformers":
        fields["make_vocab_size_divisible_by"] = 1  # transformers does not pad the vocabulary
    return Model(**fields)


def system_of(r: dict) -> str:  # type: ignore[type-arg]
    """The system preset of the GPU a line was measured on (``gpu`` field; H100 when absent)."""
    found = system_for_gpu(str(r.get("gpu", "H100")))
    if found is None:
        raise ValueError(f"gpu: no system preset for {r.get('gpu')!r} (row_rules.SYSTEM_FOR_GPU_KEY)")
    return found[0]


def _stack_version(r: dict) -> str:  # type: ignore[type-arg]
    """``@5`` for a transformers row measured with transformers 5 (its ``software`` field), whose MoE experts run
    grouped GEMMs; else the profile's default version."""
    if r["framework"] == "hf-transformers" and "transformers 5." in str(r.get("software", "")):
        return "@5"
    return ""


def run_of(r: dict, source: str = SOURCE) -> H100Run:  # type: ignore[type-arg]
    """The job of one measured line.

    ``attn_implementation: eager`` (transformers' eager attention) is the eager fp32 softmax chain on the s² scores;
    ``compile: true`` (``torch.compile(model)``) switches the profile's ``torch_compile`` on; transformers rows
    measured with transformers 5 use ``hf-transformers@5``; SDPA rows run the flash kernel library of the PyTorch
    they name (:func:`~trainsim.validation.row_rules.sdpa_kernel_named`: cuDNN from 2.11 on). Lines written by
    ``benchmarks/h100/measure_training.py`` ran in a fresh process each, so their peak memory is their own.
    """
    fw = load_framework(FRAMEWORK_OF[r["framework"]] + _stack_version(r))
    if r.get("compile"):
        fw = fw.replace(torch_compile=True)
    named = sdpa_kernel_named(str(r.get("software", "")))
    if named and r.get("attn_implementation") == "sdpa":
        fw = fw.replace(flash_kernel=named[1])
    attention = "eager" if r.get("attn_implementation") == "eager" else None
    job = Job(model=_model(r), system=load_system(system_of(r)), parallelism=Parallelism(),
              training=Training(micro_batch_size=r["mbs"], global_batch_size=r["mbs"] * r["num_microbatches"],
                                seq_length=r["seq"], recompute_granularity="full" if r["recompute"] else "none",
                                precision="bf16", attention=attention),
              num_gpus=1, framework=fw)
    fresh = str(r.get("process", "")).startswith("fresh")
    return H100Run(f"{source}_{r['name']}", fw.name, job, float(r["iter_s"]), float(r["peak_alloc_bytes"]),
                   fresh or r["name"] not in SUSPECT_MEMORY, source)


def _read(folder: str) -> list[dict]:  # type: ignore[type-arg]
    path = resources.files("trainsim") / "data" / folder / "measured.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@cache
def load_h100_runs() -> tuple[H100Run, ...]:
    """Every measured single-H100 step shipped with trainsim."""
    return tuple(run_of(r) for r in _read("gpu-h100") if "iter_s" in r)


@cache
def load_h200_runs() -> tuple[H100Run, ...]:
    """The same single-GPU steps measured on one H200 (``trainsim/data/gpu-h200``): never fitted on, reported as
    held-out runs of a GPU the constants did not see."""
    return tuple(run_of(r, H200_SOURCE) for r in _read("gpu-h200") if "iter_s" in r)


def h100_measurements() -> tuple[Measurement, ...]:
    """The single-H100 runs as :class:`~trainsim.validation.measurements.Measurement` rows (source ``h100``)."""
    return tuple(r.measurement() for r in load_h100_runs())
