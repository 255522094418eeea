"""``trainsim.predict(job)``: iteration time, throughput, MFU/HFU, memory and training cost of a job."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr

from trainsim.cost.calibration import Calibration
from trainsim.cost.job_costs import CostModel, default_cost_model, kernel_model_of
from trainsim.cost.moe import moe_breakdown
from trainsim.errors import TrainsimError
from trainsim.estimate import estimate
from trainsim.metrics import SECONDS_PER_DAY, TrainingRun, peak_flops, training_run, utilization
from trainsim.spec.job import Job
from trainsim.workload.flops import FlopsConvention, iteration_flops
from trainsim.workload.layers import shard_of
from trainsim.workload.memory import StageMemory, device_peak, memory_per_stage

__all__ = ["SECONDS_PER_DAY", "MemoryOut", "Prediction", "TrainingOut", "job_summary", "memory_report", "predict",
           "training_cost"]


class MemoryOut(BaseModel):
    """Memory per stage, the peak, and whether it fits."""

    per_stage: list[StageMemory]
    peak_bytes: float
    capacity_bytes: float
    fits: bool
    tight: bool = False  # fits, within 10 % of capacity (trainsim.workload.memory.TIGHT_MARGIN)


#: Whole-run time and cost for a token budget: the one record owned by :mod:`trainsim.metrics`.
TrainingOut = TrainingRun


class Prediction(BaseModel):
    """Everything ``trainsim predict`` reports. Times in seconds, sizes in bytes, FLOPs in FLOP."""

    model_config = ConfigDict(extra="allow")

    engine: str
    iteration_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float
    flops_convention: str
    model_tflops_per_gpu: float
    peak_flops_per_gpu: float
    mfu: float
    hfu: float
    breakdown_s: dict[str, float]
    bubble_fraction: float
    stage_busy_s: list[float]
    memory: MemoryOut
    training: TrainingOut | None = None
    measured_compute_fraction: float = 0.0
    measured_comm_fraction: float = 0.0
    approximations: list[str] = []
    kernels: str = "analytic"  # GEMM/attention kernel model used: measured (H100 surface), tables or analytic
    moe: dict[str, Any] | None = None
    job: dict[str, Any]
    _timeline: Any = PrivateAttr(default=None)

    @property
    def timeline(self) -> Any:
        """The event engine's :class:`~trainsim.engine.timeline.Timeline` (``None`` for the analytic engine)."""
        return self._timeline

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (the ``--json`` output)."""
        return self.model_dump(mode="json", exclude_none=True)

    def summary(self) -> dict[str, Any]:
        """The headline numbers in one flat mapping (SI units): the row of :meth:`to_frame`."""
        j = self.job
        row: dict[str, Any] = {
            "model": j["model"]["name"], "system": j["system"]["name"], "num_gpus": j["num_gpus"],
            **{k: j[k] for k in ("tp", "pp", "vpp", "cp", "ep", "dp", "micro_batch_size", "global_batch_size",
                                 "seq_length", "precision")},
            "engine": self.engine, "iteration_time_s": self.iteration_time_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu, "hfu": self.hfu, "bubble_fraction": self.bubble_fraction,
            "peak_memory_bytes": self.memory.peak_bytes, "fits": self.memory.fits,
            **{f"time_{k}_s": v for k, v in self.breakdown_s.items()},
        }
        if self.training is not None:
            row.update(training_days=self.training.days, gpu_hours=self.training.gpu_hours,
                       cost_usd=self.training.cost_usd)
        return row

    def to_frame(self) -> Any:
        """A one-row :class:`pandas.DataFrame` of :meth:`summary` (concatenate several to compare plans)."""
        import pandas as pd

        return pd.DataFrame([self.summary()])

    def _repr_html_(self) -> str:
        """Rich display in Jupyter: the headline numbers and the time breakdown."""
        import html

        s = self.summary()
        rows = [("iteration time", f"{self.iteration_time_s:.4g} s"), ("tokens/s per GPU",
                f"{self.tokens_per_s_per_gpu:,.0f}"), ("MFU / HFU", f"{self.mfu:.1%} / {self.hfu:.1%}"),
                ("peak memory", f"{self.memory.peak_bytes / 1e9:.1f} GB "
                                f"({'fits' if self.memory.fits else 'does NOT fit'})")]
        if self.training is not None:
            rows += [("training time", f"{self.training.days:,.1f} days"), ("cost", f"${self.training.cost_usd:,.0f}")]
        rows += [(f"time: {k}", f"{v:.4g} s ({v / self.iteration_time_s:.1%})")
                 for k, v in self.breakdown_s.items() if v > 0]
        title = (f"{s['model']} on {s['num_gpus']} × {self.job['system']['gpu']['name']} (tp {s['tp']}, pp {s['pp']}, "
                 f"dp {s['dp']}; gbs {s['global_batch_size']}, seq {s['seq_length']}, {s['precision']})")
        body = "".join(f"<tr><td>{html.escape(a)}</td><td style='text-align:right'>{html.escape(b)}</td></tr>"
                       for a, b in rows)
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.approximations)
        return (f"<div><b>{html.escape(title)}</b><table>{body}</table>"
                + (f"<ul>{notes}</ul>" if notes else "") + "</div>")


def job_summary(job: Job) -> dict[str, Any]:
    """The resolved configuration of a job, for reports."""
    par, tr = job.parallelism, job.training
    return {
        "model": job.model.model_dump(exclude_none=True),
        "system": job.system.model_dump(exclude_none=True),
        "num_gpus": job.world_size,
        "num_nodes": job.num_nodes,
        "tp": par.tp,
        "pp": par.pp,
        "vpp": par.vpp,
        "cp": par.cp,
        "cp_levels": list(job.cp_levels) if par.cp > 1 else None,
        "ep": par.ep,
        "etp": par.expert_tp,
        "expert_dp": job.expert_dp,
        "dp": job.dp,
        "tensor_parallel_mode": par.tensor_parallel_mode,
        "tp_rows": par.grid[0] if par.summa else None,
        "tp_cols": par.grid[1] if par.summa else None,
        "summa_blocks": par.summa_blocks if par.summa else None,
        "tp_inner": par.tp_inner if par.summa else None,
        "sequence_parallel": job.sequence_parallel,
        "schedule": job.schedule,
        "rank_order": par.rank_order,
        "layers_per_stage": list(job.layers_per_stage),
        "pipeline_layout": par.pipeline_layout,
        "micro_batch_size": tr.micro_batch_size,
        "global_batch_size": tr.global_batch_size,
        "num_microbatches": job.num_microbatches,
        "seq_length": job.seq_length,
        "recompute_granularity": tr.recompute_granularity,
        "recompute_modules": list(tr.recompute_modules),  # Megatron-Core's fine-grained (per-module) recomputation
        "recompute_num_layers": tr.recompute_num_layers,
        "zero_stage": tr.zero_stage,
        "overlap_grad_reduce": tr.overlap_grad_reduce,
        "overlap_param_gather": tr.overlap_param_gather,
        "tp_comm_overlap": tr.tp_comm_overlap,
        "precision": tr.precision,
        "fp8_recipe": (tr.fp8_recipe or "delayed") if tr.precision == "fp8" else None,
        "gemm_dtype": shard_of(job).gemm_dtype,  # what the linear layers' GEMMs run in (fp4 under nvfp4)
        "fp8_param_gather": tr.fp8_param_gather,
        "optimizer_cpu_offload": tr.optimizer_cpu_offload,
        "optimizer_offload_fraction": tr.offloaded_fraction,
        "param_cpu_offload": tr.param_cpu_offload,
        "attention": tr.attention,
        "num_params": job.model.num_params,
        "num_active_params": job.model.num_active_params,
        "mtp_params": job.model.mtp_params,
        "num_params_without_mtp": job.model.num_params - job.model.mtp_params,
        "dp_engine": job.dp_engine,
        "framework": {**job.framework.model_dump(exclude={"sources"}), "label": job.framework.label},
    }


def training_cost(job: Job, iteration_time_s: float, tokens: float,
                  price_per_gpu_hour: float | None = None) -> TrainingOut:
    """Days, GPU-hours and dollars to train on ``tokens`` tokens."""
    price = job.system.price_per_gpu_hour if price_per_gpu_hour is None else price_per_gpu_hour
    return training_run(tokens, job.tokens_per_iteration, iteration_time_s, job.world_size, price)


def memory_report(job: Job) -> MemoryOut:
    """Per-stage memory, peak and fit."""
    per_stage = memory_per_stage(job)
    capacity = job.system.gpu.hbm_capacity
    peak, fits, tight = device_peak(per_stage, capacity)
    return MemoryOut(per_stage=per_stage, peak_bytes=peak, capacity_bytes=capacity, fits=fits, tight=tight)


def predict(job: Job, engine: Literal["analytic", "event"] = "analytic", *, cost_model: CostModel | None = None,
            calibration: Calibration | None = None, flops_convention: FlopsConvention = "megatron",
            kernels: str = "auto", **engine_options: Any) -> Prediction:
    """Predict one training job.

    ``engine="analytic"`` (default) is the closed-form estimator (microseconds); ``engine="event"`` runs the
    discrete-event simulator when it is installed. ``cost_model`` replaces the analytic op costs (e.g. measured
    tables); ``calibration`` overrides the fitted constants. ``kernels`` chooses the GEMM/attention kernel model of
    the default cost model: ``auto`` (the measured H100 surface on Hopper GPUs, the analytic roofline elsewhere),
    ``measured`` or ``analytic`` (:func:`~trainsim.cost.job_costs.default_cost_model`); the prediction's ``kernels``
    says which one ran.
    """
    if cost_model is not None and kernels != "auto":
        raise TrainsimError("kernels", "applies to the default cost model only", "drop kernels or cost_model")
    model = cost_model or default_cost_model(job, calibration, kernels)
    if engine == "analytic":
        if engine_options:
            raise TrainsimError("engine", f"options {sorted(engine_options)} need the event engine",
                                "use engine='event'")
        est = estimate(job, model)
        extra: dict[str, Any] = {}
        timeline = None
    elif engine == "event":
        from trainsim.engine import simulate_job_timeline

        est, extra, timeline = simulate_job_timeline(job, model, **engine_options)
    else:
        raise TrainsimError("engine", f"unknown engine {engine!r}", "use 'analytic' or 'event'")
    t = est.iteration_time_s
    flops = iteration_flops(job, flops_convention)
    n = job.world_size
    peak = peak_flops(job)
    tokens = job.tokens_per_iteration
    training = None
    if job.training.train_tokens:
        training = training_cost(job, t, job.training.train_tokens)
    prediction = Prediction(
        engine=engine,
        iteration_time_s=t,
        tokens_per_s=tokens / t,
        tokens_per_s_per_gpu=tokens / t / n,
        model_flops_per_iteration=flops.model,
        hardware_flops_per_iteration=flops.hardware,
        flops_convention=flops.convention,
        model_tflops_per_gpu=flops.model / t / n / 1e12,
        peak_flops_per_gpu=peak,
        mfu=utilization(flops.model, t, n, peak),
        hfu=utilization(flops.hardware, t, n, peak),
        breakdown_s=est.breakdown_s,
        bubble_fraction=est.breakdown_s.get("pipeline_bubble", 0.0) / t if t > 0 else 0.0,
        stage_busy_s=est.stage_busy_s,
        memory=memory_report(job),
        training=training,
        measured_compute_fraction=est.measured_compute_fraction,
        measured_comm_fraction=est.measured_comm_fraction,
        approximations=approximations_of(job),
        kernels=kernel_model_of(model),
        moe=moe_breakdown(job, model) if job.model.is_moe else None,
        job=job_summary(job),
        **extra,
    )
    prediction._timeline = timeline
    return prediction


def approximations_of(job: Job) -> list[str]:
    """What the prediction models approximately: the model's notes (e.g. from its Hugging Face config), less the
    default-sequence-length note once the training sequence length is given."""
    from trainsim.spec.model import SEQ_LENGTH_NOTE

    given = job.training.seq_length is not None
    return [a for a in job.model.approximations if not (given and a.startswith(SEQ_LENGTH_NOTE))]
