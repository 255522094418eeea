"""What the data-parallel engine communicates and keeps: one explicit description shared by costs, memory and graph.

The engines differ in facts that decide the DP time at scale, so each is a parameter here rather than a branch in
the cost code:

* **when parameters are gathered** — ZeRO-1/2 (Megatron's distributed optimizer, DeepSpeed ZeRO-1/2) all-gather the
  updated parameters once per step; ZeRO-3 / FSDP without pipeline parallelism gathers every layer for every
  micro-batch, before its forward and again before its backward when it reshards after forward
  (``reshard_after_forward``, FSDP's FULL_SHARD and DeepSpeed stage 3); FSDP-style sharding *with* pipeline
  parallelism (Llama 3, torchtitan: ``reshard_after_forward=False`` and no gradient sync until the last
  micro-batch) gathers the parameters once per step, keeps them for all micro-batches, accumulates unsharded
  gradients and reduce-scatters them once: the communication and memory of the distributed optimizer;
* **how many collectives** one layer's gather is split into (``collectives_per_layer``: 1 for an FSDP unit per
  layer or FSDP2's per-layer foreach gather; DeepSpeed stage 3 gathers per sub-module) — each pays the ring latency
  of the whole group (:mod:`trainsim.cost.nccl`);
* **prefetch depth** — layers gathered ahead of the one computing (FSDP's backward/forward prefetch and
  ``limit_all_gathers`` keep 1; 0 serialises every gather with its layer);
* **reduce dtype** — bytes per gradient element reduced (fp32 by default for bf16 training, Megatron's
  ``--grad-reduce-in-bf16``/``grad_reduce_in_fp32`` and FSDP's ``reduce_dtype``);
* **overlap** — whether gradient reduction overlaps the backward pass (Megatron ``--overlap-grad-reduce``;
  the DeepSpeed engine all-reduces after the backward pass, not overlapped).

The values come from the job's resolved training (whose unset fields the framework profile filled) and from its
framework profile (:class:`~trainsim.spec.framework.Framework`: ``reshard_after_forward``, ``prefetch_depth``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.spec.training import element_bytes, grad_element_bytes
from trainsim.workload.memo import per_job

if TYPE_CHECKING:
    from trainsim.spec.job import Job
    from trainsim.workload.ops import Collective


@dataclass(frozen=True, slots=True)
class Sharding:
    """Data-parallel behaviour of a job (see the module docstring)."""

    zero_stage: int  # as given: 0 replicated, 1 optimizer, 2 + gradients, 3 + parameters
    shards: int  # ranks the states are sharded over (dp·cp)
    per_microbatch_gather: bool  # ZeRO-3/FSDP: every layer gathered for every micro-batch
    reshard_after_forward: bool  # ... and gathered again for its backward
    collectives_per_layer: int
    prefetch_depth: int
    param_bytes: float  # bytes per parameter element gathered
    grad_reduce_bytes: float  # bytes per gradient element reduced
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    grads_sharded_with_pp: bool = False  # ZeRO-3 with pipelining keeps gradients sharded (profile shard_grads_with_pp)

    @property
    def gather_per_step(self) -> bool:
        """Parameters all-gathered once per step (distributed optimizer, or FSDP-style sharding with pipelining)."""
        return self.shards > 1 and self.zero_stage >= 1 and not self.per_microbatch_gather

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
        return self.zero_stage


#: DeepSpeed ZeRO-3 fetches parameters per sub-module (``fetch_sub_module`` in ``deepspeed/runtime/zero/
#: partitioned_param_coordinator.py``, one coalesced all-gather per fetch): a transformer layer has six modules with
#: parameters (QKV, output projection, FC1, FC2 and the two norms), so six all-gathers each paying the group's latency.
DEEPSPEED_ZERO3_MODULES_PER_LAYER = 6


@per_job
def sharding_of(job: Job) -> Sharding:
    """The data-parallel behaviour of ``job``."""
    tr, par, fw = job.training, job.parallelism, job.framework
    e = element_bytes(tr.precision)
    zero = tr.zero_stage or 0
    per_mb = zero >= 3 and par.pp == 1
    return Sharding(
        zero_stage=zero,
        shards=job.dp * par.cp,
        per_microbatch_gather=per_mb,
        reshard_after_forward=per_mb and fw.reshard_after_forward,
        collectives_per_layer=DEEPSPEED_ZERO3_MODULES_PER_LAYER if per_mb and job.dp_engine == "deepspeed-zero" else 1,
        prefetch_depth=fw.prefetch_depth if zero >= 3 else 1,
        param_bytes=e,
        grad_reduce_bytes=grad_element_bytes(tr.grads_in_fp32, 2.0),  # fp32, else 16-bit
        # FSDP-style sharding with pipelining prefetches each layer's gather before its first forward and
        # reduce-scatters each layer's gradients as its last backward finishes
        overlap_grad_reduce=bool(tr.overlap_grad_reduce) or (zero >= 3 and not per_mb),
        overlap_param_gather=bool(tr.overlap_param_gather) or (zero >= 3 and not per_mb),
        grads_sharded_with_pp=zero >= 3 and not per_mb and bool(fw.shard_grads_with_pp),
    )
