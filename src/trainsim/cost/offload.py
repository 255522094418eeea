"""The host side of CPU optimizer offloading (ZeRO-Offload; Megatron-Core ``--optimizer-cpu-offload``).

With a fraction ``f`` of a GPU's (sharded) optimizer offloaded, the host holds that share's master weights and Adam
moments and runs its step (DeepSpeed's CPU-Adam, Megatron-Core's ``HybridDeviceOptimizer``); the GPU keeps the
rest. Each step the offloaded share's gradients cross the host link to the CPU, the CPU updates them at its share
of the node's DRAM bandwidth (one fused pass: the fused optimizer's bytes per parameter,
:meth:`~trainsim.spec.framework.Framework.optimizer_step_bytes`), and the updated 16-bit parameters cross back.
The GPU's share runs concurrently; the step takes the longer of the two. Gradient copies issued during the
backward pass (DeepSpeed's ``overlap_comm``) are counted in the step: an upper bound.

Efficiencies are documented priors, not fits: pinned-memory copies reach about 80 % of the PCIe rate (CUDA's
``bandwidthTest``: ~25 of 31.5 GB/s on Gen4 x16, ~50 of 63 GB/s on Gen5), and streaming kernels about 70 % of a
server's DRAM peak (STREAM triad on two-socket EPYC / Xeon servers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.spec.training import grad_element_bytes

if TYPE_CHECKING:
    from trainsim.spec.job import Job

HOST_LINK_EFFICIENCY = 0.8
HOST_MEMORY_EFFICIENCY = 0.7


def host_step_time(job: Job, local_params: float) -> float:
    """Seconds of the host's part of one optimizer step over ``local_params`` (this GPU's optimizer shard): 0
    without offloading."""
    tr, fw, host = job.training, job.framework, job.system.host
    share = tr.offloaded_fraction * local_params
    if share == 0 or host is None:
        return 0.0
    cpu_bytes = fw.replace(optimizer_impl="fused").optimizer_step_bytes(tr.precision, bool(tr.grads_in_fp32))
    cpu = share * cpu_bytes / (host.memory_bandwidth * HOST_MEMORY_EFFICIENCY)
    if tr.param_cpu_offload:  # gradients and parameters crossed with each reduce-scatter and all-gather
        return cpu
    p = fw.param_bytes(tr.precision)
    return cpu + host_copy_time(job, share * (grad_element_bytes(bool(tr.grads_in_fp32), p) + p))


def host_copy_time(job: Job, nbytes: float) -> float:
    """Seconds to move ``nbytes`` between host memory and one GPU (pinned copies at the achieved link rate)."""
    host = job.system.host
    assert host is not None, "CPU offloading needs the system's host section (checked when the job is built)"
    return nbytes / (host.link_bandwidth * HOST_LINK_EFFICIENCY)
