"""Evaluation of candidates with the analytic tier: memory first, then the closed-form iteration time.

Each worker receives an :class:`EvalContext` once and chunks of :class:`~trainsim.search.space.CandidateSpec`. The
memory of a configuration does not depend on its rank order, so consecutive candidates that differ only there share
one memory evaluation; the iteration time of a configuration that does not fit is only estimated when non-fitting
configurations are ranked too (``include_unfit``). Results are compact tuples (:data:`RESULT_FIELDS`), turned into
:class:`Candidate` records by the caller.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainsim.errors import TrainsimWarning
from trainsim.estimate import BREAKDOWN_KEYS, estimate
from trainsim.metrics import cost_per_iteration, peak_flops, training_run, utilization
from trainsim.search.space import CandidateSpec, build_job
from trainsim.workload.flops import iteration_flops
from trainsim.workload.memory import device_peak, is_tight, memory_per_stage

if TYPE_CHECKING:
    from trainsim.cost.calibration import Calibration
    from trainsim.spec.framework import Framework
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model
    from trainsim.spec.system import System
    from trainsim.spec.training import Training


@dataclass(frozen=True)
class EvalContext:
    """What every evaluation needs besides the candidate (sent once to each worker)."""

    model: Model
    system: System
    training: Training
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    price_per_gpu_hour: float = 0.0
    train_tokens: float | None = None
    include_unfit: bool = False
    calibration: Calibration | None = None
    validate: bool = False  # candidates come from enumerate_space, which validated each of them
    framework: Framework | None = None

    def job(self, spec: CandidateSpec) -> Job:
        """The job of a candidate."""
        return build_job(self.model, self.system, self.training, spec, self.first_stage_layers,
                         self.last_stage_layers, self.validate, self.framework)


#: Field order of one evaluation result (:func:`evaluate_chunk`).
RESULT_FIELDS = ("num_nodes", "fits", "peak_memory_bytes", "iteration_time_s", "mfu", "hfu", "breakdown")


@dataclass(slots=True)
class Candidate:
    """One evaluated point of the design space.

    Times in seconds, memory in bytes, cost in USD. ``iteration_time_s`` (and what derives from it) is ``None`` for
    a configuration that does not fit when non-fitting ones are not ranked. After refinement with the event engine,
    ``iteration_time_s`` is the event engine's and ``analytic_iteration_time_s`` keeps the analytic one.
    """

    index: int
    spec: CandidateSpec  # the plan (its fields read as attributes of the candidate: ``c.tp``, ``c.schedule`` ...)
    num_nodes: int
    fits: bool
    peak_memory_bytes: float
    iteration_time_s: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    breakdown: tuple[float, ...] | None = None
    tokens_per_s: float | None = None
    training_days: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None
    cost_per_iteration_usd: float | None = None
    engine: str = "analytic"
    tight: bool = False  # fits within 10 % of capacity: ranked after plans with headroom
    analytic_iteration_time_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        """The plan's fields (:class:`~trainsim.search.space.CandidateSpec`): ``c.tp``, ``c.micro_batch_size`` ..."""
        if name in CandidateSpec._fields:
            return getattr(self.spec, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size (resolved)."""
        return self.spec.etp if self.spec.etp is not None else self.spec.tp

    @property
    def breakdown_s(self) -> dict[str, float] | None:
        """Exposed time per category (sums to the iteration time)."""
        if self.breakdown is None:
            return None
        return dict(zip(BREAKDOWN_KEYS, self.breakdown, strict=True))

    @property
    def estimated(self) -> bool:
        """Whether an iteration time was computed."""
        return self.iteration_time_s is not None

    def plan(self) -> str:
        """Short text of the plan: ``tp 8 · pp 35 · dp 12`` plus the non-default parts."""
        parts = [f"tp {self.tp}", f"pp {self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp {self.vpp}")
        if self.cp > 1:
            parts.append(f"cp {self.cp}")
        if self.ep > 1:
            parts.append(f"ep {self.ep}")
        parts.append(f"dp {self.dp}")
        if self.tensor_parallel_mode == "summa":
            parts.append(f"summa {self.tp_rows}×{self.tp // (self.tp_rows or 1)} ({self.tp_inner}s inner, "
                         f"{self.summa_blocks} panels)")
        return " · ".join(parts)

    def set_time(self, iteration_time_s: float, mfu: float, hfu: float, tokens_per_iteration: int,
                 train_tokens: float | None, price_per_gpu_hour: float) -> None:
        """Fill the time-derived fields from an iteration time."""
        t = iteration_time_s
        self.iteration_time_s = t
        self.mfu = mfu
        self.hfu = hfu
        self.tokens_per_s = tokens_per_iteration / t
        self.cost_per_iteration_usd = cost_per_iteration(t, self.num_gpus, price_per_gpu_hour)
        if train_tokens:
            run = training_run(train_tokens, tokens_per_iteration, t, self.num_gpus, price_per_gpu_hour)
            self.training_days = run.days
            self.gpu_hours = run.gpu_hours
            self.cost_usd = run.cost_usd
        else:
            self.training_days = self.gpu_hours = self.cost_usd = None


def _memory(job: Job) -> tuple[bool, float]:
    peak, fits, _tight = device_peak(memory_per_stage(job), job.system.gpu.hbm_capacity)
    return fits, peak


def _evaluate_job(ctx: EvalContext, job: Job, memory: tuple[bool, float]) -> tuple[Any, ...]:
    from trainsim.cost.job_costs import default_cost_model

    fits, peak = memory
    if not fits and not ctx.include_unfit:
        return job.num_nodes, fits, peak, None, None, None, None
    est = estimate(job, default_cost_model(job, ctx.calibration))
    t = est.iteration_time_s
    flops = iteration_flops(job)
    peak_gpu = peak_flops(job)
    breakdown = tuple(est.breakdown_s[k] for k in BREAKDOWN_KEYS)
    return (job.num_nodes, fits, peak, t, utilization(flops.model, t, job.world_size, peak_gpu),
            utilization(flops.hardware, t, job.world_size, peak_gpu), breakdown)


def evaluate_spec(ctx: EvalContext, spec: CandidateSpec) -> tuple[Any, ...]:
    """Evaluate one candidate: ``(num_nodes, fits, peak_bytes, time | None, mfu, hfu, breakdown)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        job = ctx.job(spec)
        return _evaluate_job(ctx, job, _memory(job))


def evaluate_chunk(ctx: EvalContext, specs: list[CandidateSpec]) -> list[tuple[Any, ...]]:
    """Evaluate consecutive candidates, sharing the memory evaluation of those that differ only in rank order."""
    out = []
    last_key: tuple[Any, ...] | None = None
    memory = (False, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        for spec in specs:
            job = ctx.job(spec)
            key = spec._replace(rank_order="")  # memory does not depend on the rank order
            if key != last_key:
                memory = _memory(job)
                last_key = key
            out.append(_evaluate_job(ctx, job, memory))
    return out


def make_candidate(index: int, spec: CandidateSpec, result: tuple[Any, ...], ctx: EvalContext) -> Candidate:
    """A :class:`Candidate` from a spec and its evaluation result."""
    num_nodes, fits, peak, t, mfu, hfu, breakdown = result
    c = Candidate(index, spec, num_nodes=num_nodes, fits=fits, peak_memory_bytes=peak, breakdown=breakdown,
                  tight=is_tight(peak, ctx.system.gpu.hbm_capacity))
    if t is not None:
        tokens = ctx.training.global_batch_size * (ctx.training.seq_length or ctx.model.seq_length)
        c.set_time(t, mfu, hfu, tokens, ctx.train_tokens, ctx.price_per_gpu_hour)
    return c
