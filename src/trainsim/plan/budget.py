"""Compute budgets: GPUs × days (or dollars) → FLOPs, and the Chinchilla compute-optimal point.

Chinchilla (Hoffmann et al. 2022, approach 1 as quoted by vTrain): for a budget of ``C`` FLOPs the compute-optimal
model has ``N ≈ 0.089·C^0.5`` parameters trained on ``T ≈ 1.875·C^0.5`` tokens (``C ≈ 6NT``; about 21 tokens per
parameter). The *naive* point takes ``C`` at 100 % utilization of the GPUs for the whole time; the realistic point
(:func:`trainsim.plan.plan`) accounts for the utilization each model shape actually reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainsim.errors import TrainsimError
from trainsim.metrics import SECONDS_PER_DAY

CHINCHILLA_PARAMS_COEF = 0.089
CHINCHILLA_TOKENS_COEF = 1.875
#: Chinchilla tokens per parameter implied by the two coefficients (≈ 21.07).
TOKENS_PER_PARAM = CHINCHILLA_TOKENS_COEF / CHINCHILLA_PARAMS_COEF


@dataclass(frozen=True)
class Budget:
    """What a training run may use: ``num_gpus`` GPUs for ``days`` (the tighter of the days and the dollar budget)."""

    num_gpus: int
    days: float
    price_per_gpu_hour: float
    peak_flops_per_gpu: float
    budget_usd: float | None = None
    limited_by: str = "days"

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the budget."""
        return self.num_gpus * self.days * 24.0

    @property
    def cost_usd(self) -> float:
        """Dollars of the budget at the price."""
        return self.gpu_hours * self.price_per_gpu_hour

    @property
    def compute_flops(self) -> float:
        """FLOPs at 100 % utilization of every GPU for the whole time."""
        return self.num_gpus * self.peak_flops_per_gpu * self.days * SECONDS_PER_DAY

    def to_dict(self) -> dict[str, float | int | str | None]:
        """JSON-ready dictionary."""
        return {"num_gpus": self.num_gpus, "days": self.days, "budget_usd": self.budget_usd,
                "price_per_gpu_hour": self.price_per_gpu_hour, "gpu_hours": self.gpu_hours,
                "cost_usd": self.cost_usd, "peak_flops_per_gpu": self.peak_flops_per_gpu,
                "compute_flops": self.compute_flops, "limited_by": self.limited_by}


def make_budget(num_gpus: int, peak_flops_per_gpu: float, price_per_gpu_hour: float, days: float | None = None,
                budget_usd: float | None = None) -> Budget:
    """A :class:`Budget` from days and/or dollars (the tighter wins)."""
    if num_gpus <= 0:
        raise TrainsimError("num_gpus", f"must be positive (got {num_gpus})", "give the GPUs you can use")
    if days is None and budget_usd is None:
        raise TrainsimError("days", "no time or money budget", "give --days and/or --budget (USD)")
    if days is not None and days <= 0:
        raise TrainsimError("days", f"must be positive (got {days})", "give days, e.g. 30")
    if budget_usd is not None:
        if budget_usd <= 0:
            raise TrainsimError("budget_usd", f"must be positive (got {budget_usd})", "give dollars, e.g. 5e6")
        if price_per_gpu_hour <= 0:
            raise TrainsimError("price_per_gpu_hour", "a dollar budget needs a positive price",
                                "give --price-per-gpu-hour")
    limits: list[tuple[float, str]] = []
    if days is not None:
        limits.append((days, "days"))
    if budget_usd is not None:
        limits.append((budget_usd / price_per_gpu_hour / num_gpus / 24.0, "budget"))
    effective, which = min(limits)
    return Budget(num_gpus, effective, price_per_gpu_hour, peak_flops_per_gpu, budget_usd, which)


def chinchilla_point(compute_flops: float) -> tuple[float, float]:
    """(parameters, tokens) of the compute-optimal model for ``compute_flops``."""
    root = math.sqrt(compute_flops)
    return CHINCHILLA_PARAMS_COEF * root, CHINCHILLA_TOKENS_COEF * root


def chinchilla_tokens(params: float) -> float:
    """Compute-optimal tokens for a model of ``params`` parameters."""
    return TOKENS_PER_PARAM * params
