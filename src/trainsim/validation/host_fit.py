"""``Framework.host_op_s`` from our own host-bound measurements (``trainsim/data/gpu-h100/measured.jsonl``).

A row is host-bound when its micro-batches are so small (at most :data:`HOST_BOUND_TOKENS` tokens) that every kernel
is short: the 128-token ``*-host-*`` configurations of ``benchmarks/h100/measure_training.py``, whose GPU was busy
12-23 % of the step (``gpu_busy_s``, recorded by ``--trace``). Its host time per step is the step minus the
optimizer step (``iter_s - optimizer_s``; the optimizer is a handful of multi-tensor kernels), and the model says how
many operators the step issues from Python (:attr:`~trainsim.workload.ops.ComputeOp.host_calls` over every block of
every micro-batch). ``host_op_s`` of a stack is the median of their ratio over its rows.
"""

from __future__ import annotations

import statistics

from trainsim.cost.job_costs import shard_of
from trainsim.spec.job import Job
from trainsim.validation.h100 import FRAMEWORK_OF, _read, run_of
from trainsim.workload.layers import Work, embedding_work, head_work, layer_work
from trainsim.workload.stages import stage_layer_counts

#: A row is host-bound when its micro-batches hold at most this many tokens.
HOST_BOUND_TOKENS = 512


def host_calls_per_step(job: Job) -> float:
    """Operators the framework's Python issues in one step of a one-GPU job (every micro-batch, every block)."""
    shard = shard_of(job)
    m = job.model

    def calls(w: Work) -> int:
        return sum(op.host_calls for op in (*w.fwd, *w.bwd, *w.recompute))

    layers = sum(n * calls(layer_work(m, shard.with_recompute(mode), moe))
                 for (moe, mode), n in stage_layer_counts(job, 0).items())
    return (layers + calls(embedding_work(m, shard)) + calls(head_work(m, shard))) * job.num_microbatches


def host_op_samples(folder: str = "gpu-h100") -> dict[str, list[float]]:
    """Seconds per issued operator of every host-bound row, by framework profile."""
    out: dict[str, list[float]] = {}
    for r in _read(folder):
        if "iter_s" not in r or r["mbs"] * r["seq"] > HOST_BOUND_TOKENS:
            continue
        job = run_of(r).job
        out.setdefault(FRAMEWORK_OF[r["framework"]], []).append(
            (r["iter_s"] - r["optimizer_s"]) / host_calls_per_step(job))
    return out


def fit_host_op_s(folder: str = "gpu-h100") -> dict[str, float]:
    """The median seconds per issued operator of each framework's host-bound rows."""
    return {fw: statistics.median(v) for fw, v in host_op_samples(folder).items()}
