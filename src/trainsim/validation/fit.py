"""Fit the analytic model's constants on the published measurements.

Per GPU generation we fit a handful of efficiencies (:data:`FIT_PARAMETERS`) by minimising the mean squared log
error of the predicted iteration times, plus a weak pull towards the documented priors (:data:`PRIORS`) so that
constants the data cannot identify stay physical. The search is a deterministic coordinate descent with golden-section
line searches inside physical bounds: no randomness, same result on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainsim.cost.calibration import Calibration
from trainsim.cost.job_costs import default_cost_model
from trainsim.estimate import estimate
from trainsim.validation.measurements import Measurement

# constant -> (prior, prior sigma in the constant's units, lower bound, upper bound)
PRIORS: dict[str, tuple[float, float, float, float]] = {
    "gemm_efficiency": (0.80, 0.15, 0.40, 0.95),
    "fp8_gemm_efficiency": (0.60, 0.15, 0.25, 0.90),
    "attention_efficiency": (0.55, 0.15, 0.25, 0.85),
    "nvlink_efficiency": (0.75, 0.10, 0.40, 0.95),
    "network_efficiency": (0.85, 0.10, 0.40, 0.97),
    "kernel_overhead_s": (4e-6, 4e-6, 0.0, 4e-5),
    "iteration_overhead_s": (0.0, 0.05, 0.0, 0.5),
    "memory_efficiency": (0.80, 0.10, 0.50, 0.95),
    "measured_kernel_scale": (1.0, 0.15, 0.60, 1.10),
    "measured_fp8_kernel_scale": (1.0, 0.20, 0.50, 1.10),
}

# which constants each generation's data can inform
FIT_PARAMETERS: dict[str, tuple[str, ...]] = {
    "ampere": ("gemm_efficiency", "memory_efficiency", "nvlink_efficiency", "network_efficiency", "kernel_overhead_s"),
    # Hopper GEMM and attention kernels come from the measured H100 surface (trainsim.cost.kernel_surfaces): the
    # fitted constants describe only what a real step adds to them, HBM efficiency and communication
    "hopper": ("measured_kernel_scale", "measured_fp8_kernel_scale", "memory_efficiency", "nvlink_efficiency",
               "network_efficiency", "kernel_overhead_s", "iteration_overhead_s"),
}
PRIOR_WEIGHT = 0.002
_GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class FitResult:
    """Fitted constants of one generation and the loss reached."""

    generation: str
    calibration: Calibration
    loss: float
    rows: int


def predicted_times(rows: Sequence[Measurement], calib: Calibration) -> list[float]:
    """Analytic iteration time of every row under ``calib``."""
    out = []
    for row in rows:
        model = default_cost_model(row.job, calib)
        out.append(estimate(row.job, model).iteration_time_s)
    return out


def _loss(rows: Sequence[Measurement], calib: Calibration, names: Sequence[str]) -> float:
    pred = predicted_times(rows, calib)
    data = sum(math.log(p / r.measured_iter_s) ** 2 for p, r in zip(pred, rows, strict=True)) / len(rows)
    prior = 0.0
    for name in names:
        mu, sigma, _lo, _hi = PRIORS[name]
        prior += ((getattr(calib, name) - mu) / sigma) ** 2
    return data + PRIOR_WEIGHT * prior


def _golden(f: Callable[[float], float], lo: float, hi: float, iters: int) -> float:
    a, b = lo, hi
    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_generation(rows: Sequence[Measurement], generation: str, start: Calibration | None = None,
                   names: Sequence[str] | None = None, sweeps: int = 4, iters: int = 14) -> FitResult:
    """Fit the constants of ``generation`` on ``rows`` (all of that generation).

    Without an FP8 row the FP8 kernel scale cannot be identified: it follows the 16-bit one (the same GPU's
    sustained clocks and launch overheads) instead of its prior."""
    names = tuple(names or FIT_PARAMETERS[generation])
    tied = "measured_fp8_kernel_scale" in names and not any(r.job.training.precision == "fp8" for r in rows)
    if tied:
        names = tuple(n for n in names if n != "measured_fp8_kernel_scale")
    calib = start or Calibration(**{n: PRIORS[n][0] for n in names})
    for _ in range(sweeps):
        for name in names:
            _mu, _sigma, lo, hi = PRIORS[name]
            current = calib

            def f(x: float, name: str = name, current: Calibration = current) -> float:
                return _loss(rows, current.with_(**{name: x}), names)

            best = _golden(f, lo, hi, iters)
            if f(best) < f(getattr(current, name)):
                calib = current.with_(**{name: best})
    if tied:
        calib = calib.with_(measured_fp8_kernel_scale=calib.measured_kernel_scale)
    return FitResult(generation, calib, _loss(rows, calib, names), len(rows))


def rows_by_generation(rows: Sequence[Measurement]) -> dict[str, list[Measurement]]:
    """Group measurements by their GPU generation."""
    out: dict[str, list[Measurement]] = {}
    for r in rows:
        out.setdefault(r.job.system.gpu.generation, []).append(r)
    return out
