"""What the data-parallel engine communicates and keeps: one explicit description shared by costs, memory and graph.

The engines differ in facts that decide the DP time at scale, so each is a parameter here rather than a branch in
the cost code:

* **when parameters are gathered** — ZeRO-1/2 (Megatron's distributed optimizer, DeepSpeed ZeRO-1/2) all-gather the
  updated parameters once per step; ZeRO-3 / FSDP without pipeline parallelism gathers every layer for every
  micro-batch, before its forward and again before its backward when it reshards after forward
  (``reshard_after_forward``, FSDP's FULL_SHARD and DeepSpeed stage 3); FSDP-style sharding *with* pipeline
  parallelism (torchtitan: ``reshard_after_forward=False`` and no gradient sync until the last micro-batch)
  gathers the parameters once per step, keeps them for all micro-batches, accumulates unsharded gradients and
  reduce-scatters them once: the communication and memory of the distributed optimizer; where the profile keeps
  gradients sharded with pipelining (``shard_grads_with_pp``: Llama 3's FSDP "shards optimizer states and
  gradients") the memory is ZeRO-2's (gradients sharded) while the traffic is still counted once per step (the
  reduce-scatter per round of micro-batches such a stack needs is not modelled);
* **how many collectives** one layer's gather is split into (:attr:`Sharding.collectives_per_layer`: 1 for an
  FSDP unit per layer or FSDP2's per-layer foreach gather; DeepSpeed stage 3 gathers per sub-module) — each pays the
  ring latency of the whole group (:mod:`trainsim.cost.nccl`);
* **prefetch depth** — layers gathered ahead of the one computing (FSDP's backward/forward prefetch and
  ``limit_all_gathers`` keep 1; 0 serialises every gather with its layer);
* **reduce dtype** — bytes per gradient element reduced (fp32 by default for bf16 training, Megatron's
  ``--grad-reduce-in-bf16``/``grad_reduce_in_fp32`` and FSDP's ``reduce_dtype``);
* **overlap** — whether gradient reduction overlaps the backward pass (Megatron ``--overlap-grad-reduce``;
  the DeepSpeed engine all-reduces after the backward pass, not overlapped).

* **gather units** (:func:`gather_units`) — what one all-gather fetches: the whole layer (FSDP1's FlatParameter per
  wrapped block, FSDP2's ``fully_shard`` module) or each sub-module (DeepSpeed ZeRO-3's ``fetch_sub_module``), whose
  tensors below ``stage3_param_persistence_threshold`` elements stay gathered;
* **prefetch rules** — FSDP1's ``limit_all_gathers`` / ``forward_prefetch`` / ``backward_prefetch``, DeepSpeed's
  ``stage3_prefetch_bucket_size`` and ``stage3_max_live_parameters``, and DeepSpeed's gradient ``reduce_bucket_size``
  (scheduled by :mod:`trainsim.cost.sharded`);
* **hybrid sharding** (``sharding_strategy: hybrid``: FSDP1 ``HYBRID_SHARD``, FSDP2 HSDP) — states sharded over the
  data-parallel ranks of one node and replicated across nodes: gathers and reduce-scatters stay inside the node,
  and each reduce-scatter's shard is then all-reduced across the replicas (FSDP1 ``_all_reduce_stream``);
* **reuse distance** (``max_reuse_params``, DeepSpeed's ``stage3_max_reuse_distance``) — with full recompute a
  sub-module whose backward is further than that many elements from its recompute forward is released in between
  and gathered again;
* **2021 DeepSpeed** (``gather_device_sync``, ``collective_rank_lists``, ``gather_granularity: tensor``) — every
  parameter tensor its own all-gather after a device-wide synchronize and its own reduce-scatter, through
  torch.distributed's list collectives whose per-rank copies the host dispatches;
* **copies** — FSDP2 copies the all-gather output into the per-parameter tensors and the gradients into the
  reduce-scatter input (casting to the reduce dtype), both on the compute stream
  (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: ``foreach_all_gather_copy_out``,
  ``foreach_reduce_scatter_copy_in`` before ``reduce_scatter_stream.wait_stream(current_stream)``); FSDP1 casts
  the flat gradient to the reduce dtype on its post-backward stream when the dtypes differ, DeepSpeed copies every
  gradient into its contiguous bucket (``contiguous_gradients``, default True) on its reduce stream.

The values come from the job's resolved training (whose unset fields the framework profile filled) and from its
framework profile (:class:`~trainsim.spec.framework.Framework`: ``reshard_after_forward``, ``prefetch_depth``,
``gather_granularity``, ``module_layout``, ``prefetch_bucket_params``, ``max_live_params``,
``param_persistence_threshold``, ``bucket_size_params``, ``forward_prefetch``, ``backward_prefetch``,
``limit_all_gathers``, ``all_gather_copy_out``, ``max_reuse_params``, ``gather_device_sync``,
``collective_rank_lists``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trainsim.errors import TrainsimError
from trainsim.parallel.axes import Group
from trainsim.parallel.layout import placements_of
from trainsim.spec.training import element_bytes, grad_element_bytes
from trainsim.workload.memo import per_job

if TYPE_CHECKING:
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model
    from trainsim.workload.ops import Collective


@dataclass(frozen=True, slots=True)
class Sharding:
    """Data-parallel behaviour of a job (see the module docstring)."""

    zero_stage: int  # as given: 0 replicated, 1 optimizer, 2 + gradients, 3 + parameters
    shards: int  # ranks the states are sharded over (dp·cp)
    per_microbatch_gather: bool  # ZeRO-3/FSDP: every layer gathered for every micro-batch
    reshard_after_forward: bool  # ... and gathered again for its backward
    prefetch_depth: int
    param_bytes: float  # bytes per parameter element gathered
    grad_reduce_bytes: float  # bytes per gradient element reduced
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    grads_sharded_with_pp: bool = False  # ZeRO-3 with pipelining keeps gradients sharded (profile shard_grads_with_pp)
    #: one layer's gather units, forward order: (gathered fraction, reduced fraction, compute share) of the layer
    units: tuple[tuple[float, float, float], ...] = ((1.0, 1.0, 1.0),)
    prefetch_params: float | None = None  # DeepSpeed: elements per prefetch all-gather (None: prefetch by units)
    max_live_params: float = math.inf  # DeepSpeed: gathered elements alive at once
    max_reuse_params: float = math.inf  # DeepSpeed: kept gathered when reused within this many elements
    reduce_bucket_params: float | None = None  # DeepSpeed: gradient elements per reduce-scatter (None: per unit)
    forward_depth: int = 1  # units gathered ahead in forward
    backward_order: Literal["pre", "post", "none"] = "pre"  # FSDP1 backward_prefetch
    backward_depth: int = 1
    copy_out: bool = False  # FSDP2: all-gather output copied on the compute stream
    replicas: int = 1  # hybrid sharding: copies of the sharded states (nodes), gradients all-reduced across them
    copy_in: Literal["none", "stream", "compute"] = "none"  # gradients copied (and cast) into the reduce-scatter
    # input: on the reduce-scatter's side stream (FSDP1's cast, DeepSpeed's bucket) or the compute stream (FSDP2)
    device_sync: bool = False  # the host synchronizes the device before every parameter all-gather (DeepSpeed <= 0.5)
    rank_lists: bool = False  # torch.distributed list collectives: one copy per rank dispatched by the host, and
    # every gradient tensor reduce-scattered on its own (DeepSpeed <= 0.5)
    host_per_collective: float = 0.0  # s the host spends issuing one collective (list APIs: shards x dispatch)
    partitioned_optimizer: bool = False  # stage 0 with master weights and moments partitioned (BF16_Optimizer)
    reduce_per_microbatch: bool = False  # gradients reduced after every micro-batch's backward, not once per step
    # (DeepSpeed ZeRO-2: partition_gradients reduces in every backward's hooks)

    @property
    def collectives_per_layer(self) -> int:
        """All-gathers one layer issues when every unit is fetched on its own (before prefetch batching)."""
        return sum(1 for g, _, _ in self.units if g > 0)

    def gathered_params(self, layer_params: float, stage_params: float) -> float:
        """Parameter elements held gathered at once under per-micro-batch ZeRO-3: the layer computing and those
        prefetched — ``prefetch_depth`` layers ahead (FSDP; every layer of the stage when FSDP1's rate limiter is
        off and the CPU runs ahead), or up to ``stage3_max_live_parameters`` elements (DeepSpeed counts gathered and
        in-flight parameters against it; never less than one layer)."""
        if self.prefetch_params is not None:
            return max(layer_params, min(self.max_live_params, stage_params))
        ahead = max(self.prefetch_depth, self.forward_depth)
        return min(1 + ahead, max(1.0, stage_params / layer_params if layer_params else 1.0)) * layer_params

    @property
    def gather_per_step(self) -> bool:
        """Parameters all-gathered once per step (distributed optimizer, or FSDP-style sharding with pipelining)."""
        return self.shards > 1 and (self.zero_stage >= 1 or self.partitioned_optimizer) and \
            not self.per_microbatch_gather

    @property
    def reduce_per_step(self) -> bool:
        """Gradients reduced once per step, bucket by bucket (everything but per-micro-batch ZeRO-3)."""
        return self.shards > 1 and not self.per_microbatch_gather

    @property
    def grad_collective(self) -> Collective:
        """``reduce_scatter`` when gradients or optimizer states are sharded, else ``all_reduce``."""
        return "reduce_scatter" if self.zero_stage >= 1 else "all_reduce"

    @property
    def memory_stage(self) -> int:
        """The ZeRO stage whose memory the job keeps: FSDP-style sharding with pipelining holds the gathered
        parameters and unsharded gradients through the step, with sharded master weights and optimizer states —
        the distributed optimizer's footprint — or, where the profile keeps gradients sharded with pipelining
        (Llama 3's FSDP "shards optimizer states and gradients"), ZeRO-2's."""
        if self.zero_stage >= 3 and not self.per_microbatch_gather:
            return 2 if self.grads_sharded_with_pp else 1
        return max(self.zero_stage, 1 if self.partitioned_optimizer else 0)


#: Sub-modules with parameters of a dense transformer layer, forward order, as ``(name, weight, small tensors)``:
#: what DeepSpeed ZeRO-3's ``fetch_sub_module`` gathers one module at a time
#: (``deepspeed/runtime/zero/partitioned_param_coordinator.py``). ``transformers`` layout: Llama-family models
#: (gated MLP) have separate ``q_proj``/``k_proj``/``v_proj`` and ``gate_proj``/``up_proj``/``down_proj``
#: (``modeling_llama.py``), GPT-family ones a fused QKV (``query_key_value`` / ``c_attn``) and ``fc1``/``fc2``;
#: ``megatron`` layout: ``linear_qkv``, ``linear_proj``, ``linear_fc1`` (gate and up fused), ``linear_fc2``.
def layer_modules(model: Model, layout: str = "transformers") -> list[tuple[float, list[float]]]:
    """``(weight elements, [other tensors' elements])`` of every parameterised sub-module of one layer, forward order;
    the norms are modules of their own (a weight, and a bias for LayerNorm)."""
    h = model.hidden_size
    norm = [float(h)] + ([float(h)] if model.normalization == "LayerNorm" else [])
    if model.multi_latent_attention or model.is_moe:  # no per-module layout: attention and MLP as one module each
        attn = float(model.attention_params - model._norm_params)
        mlp = float(model.layer_params - model.attention_params - model._norm_params)
        return [(norm[0], norm[1:]), (attn, []), (norm[0], norm[1:]), (max(mlp, 0.0), [])]
    heads, d, g, ffn = model.num_attention_heads, model.head_dim, model.query_groups, model.ffn_size
    q, kv = heads * d, g * d
    bias = model.add_bias_linear
    qkv_bias = bias or model.add_qkv_bias
    separate = layout == "transformers" and model.swiglu
    mods: list[tuple[float, list[float]]] = [(norm[0], norm[1:])]
    if separate:
        mods += [(float(h * q), [float(q)] if qkv_bias else []), (float(h * kv), [float(kv)] if qkv_bias else []),
                 (float(h * kv), [float(kv)] if qkv_bias else [])]
    else:
        mods.append((float(h * (q + 2 * kv)), [float(q + 2 * kv)] if qkv_bias else []))
    if model.qk_layernorm:
        mods[-1][1].extend([float(d), float(d)])
    mods.append((float(q * h), [float(h)] if bias else []))
    mods.append((norm[0], norm[1:]))
    if model.swiglu and separate:
        mods += [(float(h * ffn), [float(ffn)] if bias else []), (float(h * ffn), [float(ffn)] if bias else [])]
    else:
        up = 2 * ffn if model.swiglu else ffn
        mods.append((float(h * up), [float(up)] if bias else []))
    mods.append((float(ffn * h), [float(h)] if bias else []))
    return mods


def gather_units(model: Model, granularity: str, layout: str, persistence: float) -> tuple[
        tuple[float, float, float], ...]:
    """One layer's gather units as fractions of its parameters: ``(gathered, reduced, compute share)``.

    ``layer``: one unit (every parameter gathered). ``module``: one unit per sub-module (:func:`layer_modules`);
    tensors with fewer than ``persistence`` elements stay gathered (DeepSpeed's persistent parameters) and a module
    left with nothing to gather (a norm) issues no all-gather; compute is shared in proportion to the GEMM weights
    (2 FLOPs per weight per token), the norms taking none. ``tensor``: one unit per parameter tensor (DeepSpeed <=
    0.5's ``_allgather_param`` / ``_reduce_scatter_gradient``: every tensor its own all-gather and reduce-scatter,
    persistent ones reduced too), the module's compute on its weight's unit.
    """
    if granularity not in ("module", "tensor"):
        return ((1.0, 1.0, 1.0),)
    mods = layer_modules(model, layout)
    total = sum(w + sum(o) for w, o in mods)
    norm = 2.0 * model.hidden_size  # a norm's weight (and bias) — no GEMM
    linear = sum(w for w, _ in mods if w > norm) or 1.0
    units = []
    for w, others in mods:
        tensors = [w, *others]
        share = w / linear if w > norm else 0.0
        if granularity == "tensor":  # every tensor its own unit; the module's compute on its weight
            for i, t in enumerate(tensors):
                units.append((t / total if t >= persistence else 0.0, t / total, share if i == 0 else 0.0))
            continue
        gathered = sum(t for t in tensors if t >= persistence)
        units.append((gathered / total, sum(tensors) / total, share))
    return tuple(units)


@per_job
def sharding_of(job: Job) -> Sharding:
    """The data-parallel behaviour of ``job``."""
    tr, par, fw = job.training, job.parallelism, job.framework
    e = element_bytes(tr.precision)
    zero = tr.zero_stage or 0
    engine = job.dp_engine
    # FSDP's SHARD_GRAD_OP (ZeRO-2; FSDP2 reshard_after_forward=False) shards the parameters like FULL_SHARD and
    # gathers them for every forward, but keeps them gathered until that micro-batch's backward has run
    fsdp_zero2 = zero == 2 and engine in ("fsdp1", "fsdp2")
    per_mb = (zero >= 3 or fsdp_zero2) and par.pp == 1
    grad_bytes = grad_element_bytes(tr.grads_in_fp32, 2.0)  # fp32, else 16-bit
    depth = fw.prefetch_depth if zero >= 3 or fsdp_zero2 else 1
    # FSDP1's rate limiter keeps two all-gathered units in flight; without it the CPU issues every gather ahead
    forward_depth = depth if fw.limit_all_gathers is not False else 1 << 30
    backward_order = fw.backward_prefetch or "pre"
    by_elements = fw.prefetch_bucket_params is not None and engine == "deepspeed-zero"
    shards, replicas = job.dp * par.cp, 1
    rank_lists = bool(fw.collective_rank_lists) and engine == "deepspeed-zero"
    if fw.sharding_strategy == "hybrid" and zero >= 1 and shards > 1:
        per_node = placements_of(job)[Group.DP_CP].per_node
        if not per_mb or per_node < 2:
            raise TrainsimError("framework.sharding_strategy", "hybrid sharding needs ZeRO-3 without pipelining and "
                                f"at least two data-parallel ranks per node (got pp {par.pp}, {per_node} per node)",
                                "use --sharding-strategy full")
        shards, replicas = per_node, shards // per_node
    return Sharding(
        zero_stage=zero,
        shards=shards,
        replicas=replicas,
        per_microbatch_gather=per_mb,
        reshard_after_forward=per_mb and fw.reshard_after_forward and not fsdp_zero2,
        prefetch_depth=depth,
        param_bytes=1.0 if tr.fp8_param_gather else e,  # --fp8-param-gather: FP8 all-gathers
        grad_reduce_bytes=grad_bytes,
        # FSDP-style sharding with pipelining prefetches each layer's gather before its first forward and
        # reduce-scatters each layer's gradients as its last backward finishes
        overlap_grad_reduce=bool(tr.overlap_grad_reduce) or (zero >= 3 and not per_mb),
        overlap_param_gather=bool(tr.overlap_param_gather) or (zero >= 3 and not per_mb),
        grads_sharded_with_pp=zero >= 3 and not per_mb and bool(fw.shard_grads_with_pp),
        units=gather_units(job.model, fw.gather_granularity or "layer", fw.module_layout or "transformers",
                           float(fw.param_persistence_threshold or 0)),
        prefetch_params=float(fw.prefetch_bucket_params) if by_elements and fw.prefetch_bucket_params else None,
        max_live_params=float(fw.max_live_params) if fw.max_live_params else math.inf,
        max_reuse_params=(float(fw.max_reuse_params) if fw.max_reuse_params and engine == "deepspeed-zero"
                          else math.inf),
        reduce_bucket_params=(float(fw.bucket_size_params) if engine == "deepspeed-zero" and fw.bucket_size_params
                              else None),
        forward_depth=forward_depth,
        backward_order=backward_order,
        backward_depth=depth,
        copy_out=bool(fw.all_gather_copy_out),
        device_sync=bool(fw.gather_device_sync) and engine == "deepspeed-zero",
        rank_lists=rank_lists,
        host_per_collective=shards * fw.host_dispatch_s if rank_lists else 0.0,
        partitioned_optimizer=job.bf16_optimizer,
        reduce_per_microbatch=engine == "deepspeed-zero" and zero == 2 and shards > 1,
        copy_in=("compute" if fw.all_gather_copy_out else
                 "stream" if engine == "deepspeed-zero" or grad_bytes != e else "none"),
    )
