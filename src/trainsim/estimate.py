"""Analytic iteration-time estimate: closed-form composition of the per-stage costs.

Pipeline (``m`` micro-batches, ``p`` stages, ``v`` virtual stages, per-stage forward/backward ``F_s``/``B_s`` per
micro-batch, ``P`` the exposed part of one point-to-point transfer — all of it, except in the interleaved schedule with
Megatron-Core's default ``overlap_p2p_comm`` where only what outlasts a chunk's forward; chunk times
``f_s = F_s/v``):

- the pipelined passes take the schedule's closed form (:meth:`PipelineSchedule.pipeline_time
  <trainsim.schedule.pipeline.PipelineSchedule.pipeline_time>`: 1F1B and interleaved
  ``(m·v − 1)·max_s(f_s + b_s + 2P) + Σ_s (f_s + b_s) + 2(p − 1)P``, GPipe, ZB-H1, ZB-V and DualPipe-V their own);

Data parallelism: stage ``s`` finishes its last backward ``s·(B̄ + P)`` before stage 0 does (pipeline drain), so its
gradient synchronisation has that much slack; with ``--overlap-grad-reduce`` all but the last bucket also hide behind
the last micro-batch's backward, which runs slower by the overlap factor while it hides them (as does the forward
hiding the parameter all-gather and the compute hiding ZeRO-3 gathers). The tied-embedding all-reduce follows; the
optimizer step waits for every stage (the gradient-norm all-reduce is a global barrier); with the distributed
optimizer the parameter all-gather follows it, or hides behind the next forward with ``--overlap-param-gather``. The
exposed times by category sum to the iteration time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.cost.job_costs import CostModel, StageCost, default_cost_model, stage_costs
from trainsim.parallel.axes import BREAKDOWN_KEY, Group
from trainsim.workload.sharding import sharding_of

if TYPE_CHECKING:
    from trainsim.spec.job import Job

BREAKDOWN_KEYS = ("compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "pipeline_bubble", "optimizer",
                  "other")


@dataclass(frozen=True)
class Estimate:
    """Result of the analytic estimator."""

    iteration_time_s: float
    breakdown_s: dict[str, float]
    stage_busy_s: list[float]
    critical_stage: int
    measured_compute_fraction: float = 0.0
    measured_comm_fraction: float = 0.0


def exposed_p2p(job: Job, stages: list[StageCost]) -> float:
    """Point-to-point time on the critical path per transfer.

    Megatron-Core's interleaved schedule overlaps send/recv with the next chunk's compute (``overlap_p2p_comm``,
    on by default), and zero-bubble schedules send asynchronously; only what outlasts a chunk's forward is exposed.
    1F1B and GPipe block on each transfer.
    """
    p = job.parallelism.pp
    if p == 1:
        return 0.0
    P = max(s.p2p for s in stages)
    if job.pipeline.p2p_mode(job.training.overlap_p2p_comm) == "overlap":
        chunk = min(s.fwd for s in stages) / job.parallelism.vpp
        return max(0.0, P - chunk)
    return P


def _pipeline_time(job: Job, stages: list[StageCost], P: float) -> tuple[float, int]:
    v = job.parallelism.vpp
    f = [s.fwd / v for s in stages]
    b = [s.bwd / v for s in stages]
    w = [s.total.wgrad / v for s in stages]
    return job.pipeline.pipeline_time(f, b, w, P, job.num_microbatches, v)


def _overlapped_sync(s: StageCost, vpp: int, pp: int, slow: float) -> float:
    """Gradient sync of one stage left after its backward pass, with ``--overlap-grad-reduce``.

    Each chunk's buckets are reduced as its last backward produces them; under interleaving chunk ``c``'s last
    backward ends ``c·pp`` chunk-backwards before the stage's last one (the cooldown runs chunks ``v−1 … 0``), so
    its reduce-scatter also overlaps the later chunks. The chunks' collectives queue on one stream; what ends after
    the stage's last backward is exposed, and the backward they overlap runs ``slow`` slower.
    """
    b = s.bwd / vpp
    r = s.grad_sync / vpp
    bucket = min(s.grad_bucket, r)
    free = -math.inf
    for c in range(vpp - 1, -1, -1):
        end = -c * pp * b
        free = max(free + r, end - b + r, end + bucket)
    exposed = max(0.0, free)
    return exposed + slow * min(max(0.0, s.grad_sync - exposed), vpp * pp * b)


def _dp_exposed(job: Job, stages: list[StageCost], P: float, slow: float) -> float:
    sh = sharding_of(job)
    p, v = job.parallelism.pp, job.parallelism.vpp
    mean_b = sum(s.bwd for s in stages) / p / v
    # DeepSpeed ZeRO-2 reduces after every micro-batch's backward and waits for it before the next forward
    rounds = job.num_microbatches if sh.reduce_per_microbatch else 1
    finish = []
    for s in stages:
        slack = s.stage * (mean_b + P)
        sync = _overlapped_sync(s, v, p, slow) if sh.overlap_grad_reduce else s.grad_sync
        finish.append(rounds * sync + s.embedding_sync - slack)
    return max(0.0, max(finish))


def _param_gather_exposed(job: Job, stages: list[StageCost], P: float, slow: float) -> float:
    sh = sharding_of(job)
    if not sh.gather_per_step:
        return 0.0
    if not sh.overlap_param_gather:
        return max(s.param_gather for s in stages)
    exposed = []
    for s in stages:
        window = s.stage * (stages[0].fwd / job.parallelism.vpp + P) + s.fwd / job.parallelism.vpp
        shown = max(s.param_bucket, s.param_gather - window)
        exposed.append(shown + slow * min(s.param_gather - shown, s.fwd / job.parallelism.vpp))
    return max(0.0, max(exposed))


def estimate(job: Job, cost_model: CostModel | None = None) -> Estimate:
    """Analytic iteration time of ``job`` with its breakdown."""
    model = cost_model or default_cost_model(job)
    stages = stage_costs(job, model)
    m, v = job.num_microbatches, job.parallelism.vpp
    p = job.parallelism.pp
    P = exposed_p2p(job, stages)
    pipe, crit = _pipeline_time(job, stages, P)
    c = stages[crit].total
    zero3 = stages[crit].zero3_exposed
    compute = m * (c.fwd_compute + c.bwd_compute + c.overlap_penalty_fwd + c.overlap_penalty_bwd)
    # per-micro-batch exposed collectives, each under its group's breakdown entry (the 2D grid's rows and columns and
    # expert-TP count as tensor-parallel time, as in the event engine)
    comm = dict.fromkeys(("tp_comm", "cp_comm", "ep_comm"), 0.0)
    for g, t in c.exposed.items():
        key = BREAKDOWN_KEY[Group(g)]
        if key in comm:
            comm[key] += m * t
    pp_comm = job.pipeline.transfers_on_path(p, m, v) * P
    slow = model.calibration.overlap_slowdown
    dp = _dp_exposed(job, stages, P, slow) + _param_gather_exposed(job, stages, P, slow) + m * zero3
    optimizer = max(s.optimizer for s in stages)
    other = model.calibration.iteration_overhead_s
    bubble = pipe - compute - sum(comm.values()) - pp_comm - m * zero3
    breakdown = {
        "compute": compute,
        **comm,
        "pp_comm": pp_comm,
        "dp_comm": dp,
        "pipeline_bubble": max(0.0, bubble),
        "optimizer": optimizer,
        "other": other + min(0.0, bubble),
    }
    total = sum(breakdown.values())
    busy = [m * (s.fwd + s.bwd) + s.optimizer for s in stages]
    total_compute = sum(s.total.fwd_compute + s.total.bwd_compute - s.total.host_wait for s in stages)
    measured = sum(s.total.measured for s in stages)
    comm = sum(s.total.comm for s in stages)
    comm_measured = sum(s.total.comm_measured for s in stages)
    return Estimate(total, breakdown, busy, crit, measured / total_compute if total_compute else 0.0,
                    comm_measured / comm if comm else 0.0)
