"""Host-bound passes: when the CPU issuing a layer's operators is slower than the GPU running them.

An eager training step issues every operator from Python (module code, autograd, the kernel launches): the stack's
``host_op_s`` per modelled operator (``Framework.host_op_s``, measured on one H100 by
``benchmarks/h100/measure_training.py``'s ``host`` configurations, 128-token micro-batches where every kernel is short
and the step time is the host's; :mod:`trainsim.validation.host_fit`). The host runs ahead of the GPU through a layer,
so a pass of one block costs ``max(GPU, host)``; blocks are not amortised against each other (a dropless MoE layer
waits for its token counts, Megatron-Core's ``cuda_sync_point``, so the host cannot run ahead across it, and the
layer's pass costs ``max(GPU, host)`` on each side of that synchronisation).
Operators issued by a Python loop over the local experts (``host_calls > 1``) run in lockstep with the host: the loop
waits on the device as it goes (Megatron-Core's SequentialMLP: about one host synchronisation per two experts per
layer and micro-batch, ``syncs_per_step`` in ``gpu-h100/measured.jsonl``), so each costs ``max(GPU, host)`` on its own.

One owner for both engines: the analytic estimate (:mod:`trainsim.cost.job_costs`) and the event engine
(:mod:`trainsim.graph.blocks`) add :func:`host_excess` to each pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trainsim.workload.ops import ComputeOp


def op_host_time(op: ComputeOp, host_op_s: float, host_dispatch_s: float) -> float:
    """CPU seconds to issue ``op``: ``host_op_s`` per Python call, ``host_dispatch_s`` per further kernel it
    launches from C++ (a grouped GEMM looping over experts)."""
    return op.host_calls * host_op_s + max(op.kernels - op.host_calls, 0) * host_dispatch_s


def host_excess(ops: Sequence[ComputeOp], gpu: Sequence[float], host: Callable[[ComputeOp], float],
                other_gpu: float = 0.0) -> float:
    """Seconds a pass of ``ops`` (GPU times ``gpu``) waits for its host beyond its GPU time: the operators of a
    Python expert loop each ``max(GPU, host)``, the others together ``max(sum GPU + other_gpu, sum host)``.

    ``other_gpu``: the pass's GPU time besides its operators' own: the collectives its compute stream waits for
    and the slowdown of the operators they overlap. A collective is issued asynchronously (``torch.distributed``
    on NCCL enqueues the kernel and makes the compute stream wait on it; the Python call returns at once), so the
    host keeps issuing the next operators while the GPU waits for it: a host-bound pass hides its exposed
    collectives instead of adding them. Not across a host synchronisation (an op with ``host_sync``: the forward
    pass of a dropless MoE layer copies its per-expert token counts to the host before the dispatch), where the host
    waits for everything the GPU has queued, collectives included: they add as before, and the pass splits there
    into two parts that each wait for their own host - the GPU work queued before the sync cannot cover the host
    time of the operators issued after it (the attention of a MoE layer does not hide its expert dispatch)."""
    lockstep = excess = free_host = free_gpu = 0.0
    synced = False
    for op, g in zip(ops, gpu, strict=True):
        if op.host_sync:  # the host waits here for the GPU to drain: the work before cannot hide the work after
            excess += max(free_host - free_gpu, 0.0)
            free_host = free_gpu = 0.0
            synced = True
        h = host(op)
        if op.host_calls > 1:
            lockstep += max(h - g, 0.0)
        else:
            free_host += h
            free_gpu += g
    if not synced:  # one part only: the whole pass's collectives hide behind its host
        free_gpu += other_gpu
    return lockstep + excess + max(free_host - free_gpu, 0.0)
