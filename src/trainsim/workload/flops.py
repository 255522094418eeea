"""Model and hardware FLOPs per iteration, with the counting convention named.

Conventions:

- ``megatron`` (default): Megatron-LM's ``num_floating_point_operations`` generalised — 3 × the forward
  matrix-multiply FLOPs of every layer and the LM head (backward = 2 × forward), attention scores counted for the full
  s×s square even when causal. This is how Megatron-LM, NeMo and most published MFU figures count.
- ``causal``: the same but the causal half of the attention scores is not counted.

Hardware FLOPs add what recomputation executes again (full: one more forward of every recomputed layer; selective:
the core-attention forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trainsim.workload.stages import stage_layer_counts

if TYPE_CHECKING:
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model

FlopsConvention = Literal["megatron", "causal"]


@dataclass(frozen=True, slots=True)
class IterationFlops:
    """FLOPs of one iteration over the whole job."""

    model: float
    hardware: float
    convention: FlopsConvention


def _attention_score_flops(model: Model, tokens: float, seq: int, convention: FlopsConvention) -> float:
    """Forward FLOPs of QKᵀ and PV for ``tokens`` tokens of sequences of length ``seq`` (MLA: query/key heads of
    ``qk_head_dim + qk_pos_emb_head_dim``, value heads of ``v_head_dim``; sliding-window and chunked layers only
    over their window, averaged over the layers)."""
    full = 2.0 * tokens * seq * model.num_attention_heads * (model.head_dim + model.v_dim)
    full *= model.attention_span(seq) if model.causal else 1.0
    return full * (0.5 if (convention == "causal" and model.causal) else 1.0)


def layer_forward_flops(model: Model, tokens: float, seq: int, convention: FlopsConvention = "megatron",
                        moe: bool = False) -> float:
    """Forward matrix FLOPs of one layer for ``tokens`` tokens."""
    h = model.hidden_size
    flops = 2.0 * tokens * model.attention_linear_params
    flops += _attention_score_flops(model, tokens, seq, convention)
    mult = 3 if model.swiglu else 2
    if moe:
        flops += 2.0 * tokens * h * (model.num_experts or 0)  # router
        flops += model.moe_router_topk * 2.0 * tokens * h * model.expert_ffn_size * mult
        shared = model.moe_shared_expert_intermediate_size or 0
        flops += 2.0 * tokens * h * shared * mult
    else:
        flops += 2.0 * tokens * h * model.ffn_size * mult
    return flops


def model_forward_flops(model: Model, tokens: float, seq: int, convention: FlopsConvention = "megatron") -> float:
    """Forward FLOPs of the whole model (all layers and the LM head) for ``tokens`` tokens."""
    moe_layers = model.num_moe_layers
    dense_layers = model.num_layers - moe_layers
    flops = dense_layers * layer_forward_flops(model, tokens, seq, convention, moe=False)
    if moe_layers:
        flops += moe_layers * layer_forward_flops(model, tokens, seq, convention, moe=True)
    flops += 2.0 * tokens * model.hidden_size * model.padded_vocab_size()
    if model.mtp_num_layers:  # each MTP depth: the 2h → h projection, one more layer and one more LM head
        h = model.hidden_size
        per = (4.0 * tokens * h * h + layer_forward_flops(model, tokens, seq, convention, moe=model.is_moe)
               + 2.0 * tokens * h * model.padded_vocab_size())
        flops += model.mtp_num_layers * per
    return flops


def iteration_flops(job: Job, convention: FlopsConvention = "megatron") -> IterationFlops:
    """Model and hardware FLOPs of one training iteration of ``job``."""
    model, tr = job.model, job.training
    seq = job.seq_length
    tokens = float(tr.global_batch_size * seq)
    fwd = model_forward_flops(model, tokens, seq, convention)
    model_flops = 3.0 * fwd
    hardware = model_flops
    if tr.recompute_granularity == "full":
        moe_layers = model.num_moe_layers
        layers_fwd = ((model.num_layers - moe_layers) * layer_forward_flops(model, tokens, seq, convention)
                      + moe_layers * layer_forward_flops(model, tokens, seq, convention, moe=True))
        recomputed = sum(n for s in range(job.parallelism.pp) for (_moe, mode), n in stage_layer_counts(job, s).items()
                         if mode == "full")
        hardware += layers_fwd * recomputed / model.num_layers
    elif tr.recompute_granularity == "selective" and job.attention_path != "flash":
        hardware += model.num_layers * _attention_score_flops(model, tokens, seq, "megatron")
    return IterationFlops(model_flops, hardware, convention)
