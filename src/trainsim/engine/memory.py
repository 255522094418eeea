"""GPU memory over time, from the lifetimes of activations in the simulated schedule.

Per stage (one GPU of it), allocated memory = the static part of the analytic model (weights, gradients, optimizer
states, CUDA context and NCCL buffers; :func:`trainsim.workload.memory.stage_memory`) + the live activations × (1 +
the allocator fragmentation allowance). Activation lifetimes:

* a forward of micro-batch ``b`` on model chunk ``c`` allocates that chunk's activations (per layer as in
  :func:`trainsim.workload.memory.layer_activation_bytes`, recompute mode included; the embedding dropout mask on the
  first chunk) when it starts; its backward frees them when it ends;
* with full recomputation, a backward also holds one layer's full activations while it runs;
* on the last stage, the logits of a micro-batch (16-bit plus the fp32 copy of the cross entropy) live from its
  forward to its backward;
* with a split backward (ZB-H1), the backward frees everything but the inputs of the linear layers, which the
  weight-gradient pass frees;
* activations scale with the micro-batch's sequence-length ratio.

The peak then agrees with the analytic model, which multiplies one micro-batch's activations by the in-flight count
of the schedule, except where the analytic shortcut differs from the lifetimes (documented in ``docs/engine.md``):
GPipe holds ``m`` micro-batches of logits, not one; ZB-H1 holds deferred weight-gradient inputs; interleaved stages
hold the embedding mask only for chunk-0 micro-batches; varying sequence lengths change the peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trainsim.engine.timeline import Timeline
from trainsim.graph.build import Kind as K
from trainsim.graph.build import chunk_layers
from trainsim.workload.layers import Shard, shard_of
from trainsim.workload.memory import embedding_dropout_bytes, layer_activation_bytes, logits_bytes, stage_memory


@dataclass(frozen=True)
class StageMemoryTimeline:
    """Allocated bytes over time on one GPU of a stage (the replica class and step with the highest peak)."""

    stage: int
    times_s: np.ndarray
    bytes: np.ndarray
    peak_bytes: float
    peak_time_s: float
    static_bytes: float
    analytic_peak_bytes: float
    replica_class: int
    step: int

    def as_dict(self, series: bool = True) -> dict[str, Any]:
        """JSON-ready dictionary (``series``: include the time series)."""
        out: dict[str, Any] = {
            "stage": self.stage,
            "peak_bytes": self.peak_bytes,
            "analytic_peak_bytes": self.analytic_peak_bytes,
            "difference_bytes": self.peak_bytes - self.analytic_peak_bytes,
            "peak_time_s": self.peak_time_s,
            "static_bytes": self.static_bytes,
            "replica_class": self.replica_class,
            "step": self.step,
        }
        if series:
            out["t_s"] = self.times_s.tolist()
            out["bytes"] = self.bytes.tolist()
        return out


def _weight_grad_inputs(model: Any, shard: Shard, moe: bool) -> float:
    """Bytes of the linear-layer inputs one layer keeps for its weight gradients (split backward)."""
    tp, q = shard.tp, shard.saved_input_bytes
    s = shard.seq // shard.cp
    b, h, d = shard.micro_batch, model.hidden_size, model.head_dim
    rep = tp if shard.sequence_parallel else 1
    heads = model.num_attention_heads / tp
    total = q * s * b * h / rep + q * s * b * heads * d  # QKV and projection inputs
    if moe:
        tokens = s * b * model.moe_router_topk
        total += q * tokens * h + q * tokens * model.expert_ffn_size / tp
    else:
        total += q * s * b * h / rep + q * s * b * model.ffn_size / tp
    return total


def chunk_activation_bytes(job: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per ``[stage, chunk]``: activations of one micro-batch, the part kept for weight gradients, the transient
    full layer of full recomputation, and the logits."""
    model, par, tr = job.model, job.parallelism, job.training
    p, v = par.pp, par.vpp
    shard = shard_of(job)
    act = np.zeros((p, v))
    keep_w = np.zeros((p, v))
    full = np.zeros((p, v))
    logits = np.zeros((p, v))
    for s in range(p):
        stage_full = 0.0
        for c in range(v):
            for moe, mode in chunk_layers(job, s, c):
                mem_mode = mode if mode != "none" or tr.recompute_granularity != "full" else "selective"
                act[s, c] += layer_activation_bytes(model, shard.with_recompute(mem_mode), moe)
                keep_w[s, c] += _weight_grad_inputs(model, shard, moe)
                if tr.recompute_granularity == "full":
                    stage_full = max(stage_full, layer_activation_bytes(model, shard.with_recompute("none"), moe))
        full[s, :] = stage_full
        # virtual stage 0 is chunk 0 of rank 0 in every placement
        if s == 0:
            act[s, 0] += embedding_dropout_bytes(model, shard)
    head_stage, head_chunk = job.pipeline.rank_of(p, p * v - 1)
    logits[int(head_stage), int(head_chunk)] = logits_bytes(model, shard)
    keep_w = np.minimum(keep_w, act)
    return act, keep_w, full, logits


def memory_timeline(tl: Timeline) -> list[StageMemoryTimeline]:
    """Allocated memory over time per stage (see module docstring)."""
    job, g = tl.job, tl.graph
    p = g.pp
    act, keep_w, full, logits = chunk_activation_bytes(job)
    split = job.pipeline.split_backward
    analytic = [stage_memory(job, s) for s in range(p)]
    out: list[StageMemoryTimeline] = []
    sc = tl.scenario
    for s in range(p):
        ids = np.flatnonzero((g.stage == s) & np.isin(g.kind, np.array([K.FWD, K.BWD, K.WGT], dtype=np.int8)))
        kind, chunk, mb = g.kind[ids], g.chunk[ids], g.mb[ids]
        a = analytic[s]
        frag = job.framework.allocator_fragmentation
        static = a.weights_bytes + a.gradients_bytes + a.optimizer_bytes + a.other_bytes \
            - frag * a.activations_bytes
        best: StageMemoryTimeline | None = None
        for col in range(tl.start.shape[1]):
            step, cls = col // tl.classes, col % tl.classes
            rho = sc.seq[step, cls, mb]
            t0, t1 = tl.start[ids, col], tl.end[ids, col]
            A = act[s, chunk] * rho
            Aw = keep_w[s, chunk] * rho if split else np.zeros(ids.size)
            F = full[s, chunk] * rho
            L = logits[s, chunk] * rho
            fwd, bwd, wgt = kind == K.FWD, kind == K.BWD, kind == K.WGT
            times = [t0[fwd], t0[fwd], t1[bwd], t1[bwd], t0[bwd], t1[bwd], t1[wgt]]
            deltas = [A[fwd], L[fwd], -(A - Aw)[bwd], -L[bwd], F[bwd], -F[bwd], -Aw[wgt]]
            tt = np.concatenate(times)
            dd = np.concatenate(deltas)
            order = np.lexsort((dd, tt))  # frees before allocations at the same instant
            tt, dd = tt[order], dd[order]
            live = np.cumsum(dd)
            alloc = static + (1.0 + frag) * np.maximum(live, 0.0)
            k = int(np.argmax(alloc)) if alloc.size else 0
            peak = float(alloc[k]) if alloc.size else static
            if best is None or peak > best.peak_bytes:
                times_s = np.concatenate(([0.0], tt))
                series = np.concatenate(([static], alloc))
                best = StageMemoryTimeline(s, times_s, series, peak, float(tt[k]) if tt.size else 0.0, static,
                                           a.total_bytes, cls, step)
        assert best is not None
        out.append(best)
    return out
