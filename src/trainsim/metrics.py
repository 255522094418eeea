"""Per-job rates, one owner: throughput, MFU/HFU and cost from an iteration time (used by predict, search, plan and
the :class:`~trainsim.service.Predictor`).

``SECONDS_PER_DAY`` and the MFU/cost arithmetic are written only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError

if TYPE_CHECKING:
    from trainsim.spec.job import Job

SECONDS_PER_DAY = 86400.0
SECONDS_PER_HOUR = 3600.0


def peak_flops(job: Job) -> float:
    """Peak FLOP/s per GPU for the job's precision (fp32 runs on TF32 tensor cores), the MFU denominator."""
    dtype = "tf32" if job.training.precision == "fp32" else job.training.precision
    return job.system.gpu.peak_flops.for_dtype(dtype)


def utilization(flops: float, iteration_time_s: float, num_gpus: int, peak_flops_per_gpu: float) -> float:
    """Share of peak: ``flops / (t · n · peak)`` (MFU with model FLOPs, HFU with hardware FLOPs)."""
    return flops / (iteration_time_s * num_gpus * peak_flops_per_gpu)


def gpu_hours(seconds: float, num_gpus: float) -> float:
    """GPU-hours of ``num_gpus`` GPUs busy for ``seconds``."""
    return seconds / SECONDS_PER_HOUR * num_gpus


def cost_per_iteration(iteration_time_s: float, num_gpus: int, price_per_gpu_hour: float) -> float:
    """Dollars per iteration."""
    return iteration_time_s / SECONDS_PER_HOUR * num_gpus * price_per_gpu_hour


@dataclass(frozen=True)
class TrainingRun:
    """Whole-run time and cost for a token budget."""

    tokens: float
    iterations: float
    days: float
    gpu_hours: float
    cost_usd: float
    price_per_gpu_hour: float


def training_run(tokens: float, tokens_per_iteration: float, iteration_time_s: float, num_gpus: int,
                 price_per_gpu_hour: float) -> TrainingRun:
    """Days, GPU-hours and dollars to train on ``tokens`` tokens."""
    if tokens <= 0:
        raise TrainsimError("training.train_tokens", "must be positive", "give a token count such as 300e9")
    iterations = tokens / tokens_per_iteration
    seconds = iterations * iteration_time_s
    gpu_hours = seconds / SECONDS_PER_HOUR * num_gpus
    return TrainingRun(tokens, iterations, seconds / SECONDS_PER_DAY, gpu_hours, gpu_hours * price_per_gpu_hour,
                       price_per_gpu_hour)
