"""``trainsim.plan.plan``: the biggest model that trains compute-optimally within a budget of GPUs and days (or $).

1. The naive point: Chinchilla's ``N ≈ 0.089·C^0.5``, ``T ≈ 1.875·C^0.5`` with ``C`` the budget's FLOPs at 100 %
   utilization; its days are then predicted for the shape nearest to ``N`` with its best plan — far more than the
   budget, since no plan reaches 100 % utilization.
2. The realistic point: model shapes (:mod:`trainsim.plan.shapes`) each get their best plan on the GPUs (a
   :func:`~trainsim.search.search` over tp, pp, micro-batch size, recompute …); the answer is the largest shape
   whose Chinchilla token count (``≈ 21·N``) trains within the budget. Training time grows with ``N²/MFU``, so
   feasibility is (nearly) monotone in size: a k-ary search over the shapes sorted by size finds the boundary, then
   every shape up to ``verify_margin`` larger than the answer is checked too (utilization differs between shapes of
   similar size), and the largest feasible one wins.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainsim.errors import TrainsimError, TrainsimWarning
from trainsim.metrics import training_run
from trainsim.plan.budget import Budget, chinchilla_point, chinchilla_tokens, make_budget
from trainsim.plan.shapes import (
    DEFAULT_HEAD_SIZE,
    DEFAULT_HIDDEN_STEP,
    DEFAULT_MAX_ASPECT,
    DEFAULT_MIN_ASPECT,
    Shape,
    nvlink_tp,
    shape_grid,
)
from trainsim.search.backends import Backend, get_backend
from trainsim.search.evaluate import Candidate
from trainsim.spec.model import Model
from trainsim.spec.system import System
from trainsim.spec.training import Training

if TYPE_CHECKING:
    from trainsim.cost.calibration import Calibration

#: Search dimensions of the per-shape plan search and their defaults (``"all"``: open, ``None``: the default value).
#: ``"nvlink"``: the tensor-parallel sizes that divide the heads and fit in one NVLink domain.
PLAN_DIMENSIONS: dict[str, Any] = {
    "tp": "nvlink",
    "pp": "all",
    "vpp": None,
    "cp": None,
    "micro_batch_size": "all",
    "schedule": None,
    "recompute": "all",
    "zero_stage": 1,
    "sequence_parallel": True,
    "rank_order": None,
}
DEFAULT_TEMPLATE = "gpt3-175b"


@dataclass(frozen=True)
class PlanContext:
    """Everything a worker needs to find the best plan of a shape."""

    system: System
    training: Training
    num_gpus: int
    dims: dict[str, Any]
    budget_days: float
    price_per_gpu_hour: float
    calibration: Calibration | None = None


@dataclass
class ShapeResult:
    """The best plan of one shape for its Chinchilla token count."""

    shape: Shape
    tokens: float
    best: Candidate | None
    candidates: int

    @property
    def days(self) -> float:
        """Days to train (infinite without a plan that fits)."""
        return float("inf") if self.best is None or self.best.training_days is None else self.best.training_days

    @property
    def feasible(self) -> bool:
        """A plan exists (fits in memory)."""
        return self.best is not None


def _plan_dims(ctx_dims: dict[str, Any], heads: int, gpus_per_node: int) -> dict[str, Any]:
    dims = dict(ctx_dims)
    if dims.get("tp") == "nvlink":
        dims["tp"] = nvlink_tp(heads, gpus_per_node)
    return dims


def best_plan(ctx: PlanContext, shape: Shape) -> ShapeResult:
    """The fastest plan of ``shape`` on the budget's GPUs, training on its Chinchilla tokens."""
    from trainsim.search.runner import search
    from trainsim.search.space import SearchSpace

    tokens = chinchilla_tokens(shape.params)
    training = ctx.training.model_copy(update={"train_tokens": tokens})
    dims = _plan_dims(ctx.dims, shape.heads, ctx.system.gpus_per_node)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        space = SearchSpace(model=shape.model, system=ctx.system, training=training, num_gpus=ctx.num_gpus,
                            others="default", **{k: v for k, v in dims.items() if v is not None})
        result = search(space, objective="training-time", backend="local", workers=1,
                        price_per_gpu_hour=ctx.price_per_gpu_hour, calibration=ctx.calibration)
    return ShapeResult(shape, tokens, result.best, len(result.candidates))


def best_plans_chunk(ctx: PlanContext, shapes: list[Shape]) -> list[ShapeResult]:
    """:func:`best_plan` for several shapes (a backend task)."""
    return [best_plan(ctx, s) for s in shapes]


@dataclass
class PlanResult:
    """Naive and realistic compute-optimal points for a budget."""

    budget: Budget
    naive_params: float
    naive_tokens: float
    naive: ShapeResult | None
    optimal: ShapeResult | None
    evaluated: list[ShapeResult] = field(default_factory=list)
    shapes_considered: int = 0
    shapes_without_layout: int = 0
    seconds: float = 0.0
    template: str = ""

    def _plan_dict(self, c: Candidate | None) -> dict[str, Any] | None:
        if c is None:
            return None
        return {"tp": c.tp, "pp": c.pp, "vpp": c.vpp, "cp": c.cp, "ep": c.ep, "dp": c.dp,
                "micro_batch_size": c.micro_batch_size, "num_gpus": c.num_gpus, "schedule": c.schedule,
                "recompute": c.recompute, "zero_stage": c.zero_stage, "sequence_parallel": c.sequence_parallel,
                "rank_order": c.rank_order, "iteration_time_s": c.iteration_time_s,
                "peak_memory_bytes": c.peak_memory_bytes}

    def to_json_dict(self) -> dict[str, Any]:
        """The ``--json`` output: ``{"naive": {...}, "optimal": {...}, ...}``."""
        naive: dict[str, Any] = {"params": self.naive_params, "tokens": self.naive_tokens, "days": None,
                                 "mfu": None, "cost_usd": None}
        if self.naive is not None and self.naive.best is not None:
            b = self.naive.best
            run = (training_run(self.naive_tokens, b.tokens_per_s, 1.0, b.num_gpus, self.budget.price_per_gpu_hour)
                   if b.tokens_per_s else None)
            naive.update(days=run.days if run else None, mfu=b.mfu, cost_usd=run.cost_usd if run else None,
                         shape={"layers": self.naive.shape.layers, "hidden_size": self.naive.shape.hidden_size,
                                "num_attention_heads": self.naive.shape.heads, "params": self.naive.shape.params},
                         plan=self._plan_dict(b))
        optimal: dict[str, Any] | None = None
        if self.optimal is not None and self.optimal.best is not None:
            o, b = self.optimal, self.optimal.best
            optimal = {"params": o.shape.params, "tokens": o.tokens, "days": o.days, "mfu": b.mfu,
                       "layers": o.shape.layers, "hidden_size": o.shape.hidden_size,
                       "num_attention_heads": o.shape.heads, "cost_usd": b.cost_usd, "plan": self._plan_dict(b)}
        return {
            "budget": self.budget.to_dict(),
            "naive": naive,
            "optimal": optimal,
            "search": {"template": self.template, "shapes_considered": self.shapes_considered,
                       "shapes_evaluated": len(self.evaluated),
                       "shapes_without_layout": self.shapes_without_layout, "seconds": self.seconds,
                       "evaluated": [{"layers": r.shape.layers, "hidden_size": r.shape.hidden_size,
                                      "params": r.shape.params, "tokens": r.tokens,
                                      "days": r.days if r.feasible else None,
                                      "mfu": r.best.mfu if r.best else None,
                                      "plan": r.best.plan() if r.best else None}
                                     for r in sorted(self.evaluated, key=lambda r: r.shape.params)]},
        }


def _training(training: Training | dict[str, Any] | None) -> Training:
    if training is None:
        return Training(global_batch_size=1920, seq_length=2048)
    if isinstance(training, dict):
        return Training(**training)
    return training


def plan(system: System | str, num_gpus: int, days: float | None = None, *, budget_usd: float | None = None,
         price_per_gpu_hour: float | None = None, training: Training | dict[str, Any] | None = None,
         template: Model | str = DEFAULT_TEMPLATE, dims: dict[str, Any] | None = None,
         head_size: int = DEFAULT_HEAD_SIZE, hidden_step: int = DEFAULT_HIDDEN_STEP,
         min_aspect: float = DEFAULT_MIN_ASPECT, max_aspect: float = DEFAULT_MAX_ASPECT,
         verify_margin: float = 0.15, backend: str | Backend = "local", workers: int | None = None,
         calibration: Calibration | None = None) -> PlanResult:
    """Naive and realistic compute-optimal model sizes for ``num_gpus`` GPUs of ``system`` for ``days`` days (and/or
    ``budget_usd`` dollars at ``price_per_gpu_hour``).

    ``training`` gives the global batch, sequence length and precision (default: 1920 × 2048 tokens, bf16);
    ``template`` the architecture family (default GPT-3); ``dims`` overrides the per-shape plan search
    (:data:`PLAN_DIMENSIONS`: values, lists, ``"all"``).
    """
    from trainsim.spec.presets import load_model, load_system

    t0 = time.perf_counter()
    sysm = load_system(system) if isinstance(system, str) else system
    tmpl = load_model(template) if isinstance(template, str) else template
    tr = _training(training)
    price = sysm.price_per_gpu_hour if price_per_gpu_hour is None else price_per_gpu_hour
    dtype = "tf32" if tr.precision == "fp32" else tr.precision
    peak = sysm.gpu.peak_flops.for_dtype(dtype)
    budget = make_budget(num_gpus, peak, price, days, budget_usd)
    n_params, n_tokens = chinchilla_point(budget.compute_flops)
    plan_dims = dict(PLAN_DIMENSIONS)
    for k, v in (dims or {}).items():
        if k not in plan_dims:
            raise TrainsimError(k, "not a plan search dimension", f"use one of {', '.join(plan_dims)}")
        plan_dims[k] = v
    ctx = PlanContext(sysm, tr, num_gpus, plan_dims, budget.days, price, calibration)

    # Shapes from 1 % of the naive size (utilization can be poor at scale) up to the naive size.
    shapes, no_layout = shape_grid(tmpl, n_params * 0.01, n_params * 1.15, num_gpus, sysm.gpus_per_node,
                                   tr.global_batch_size, head_size, hidden_step, min_aspect, max_aspect,
                                   _listed_tp(plan_dims.get("tp")))
    if not shapes:
        raise TrainsimError("num_gpus", f"no model shape between {n_params * 0.01 / 1e9:.3g}B and "
                            f"{n_params * 1.15 / 1e9:.3g}B parameters has a parallel layout on {num_gpus} GPUs "
                            f"with global batch {tr.global_batch_size}",
                            "use a GPU count with more small factors, or another --global-batch-size")
    owns = not isinstance(backend, Backend)
    runner = backend if isinstance(backend, Backend) else get_backend(backend, workers)
    results: dict[int, ShapeResult] = {}

    def evaluate(indices: list[int]) -> None:
        todo = [i for i in dict.fromkeys(indices) if i not in results]
        if not todo:
            return
        chunks = [[shapes[i]] for i in todo]
        out = runner.map(best_plans_chunk, ctx, chunks)
        for i, res in zip(todo, out, strict=True):
            results[i] = res[0]

    def ok(i: int) -> bool:
        return results[i].feasible and results[i].days <= budget.days

    try:
        # naive point: the shape nearest the naive size (relative difference) that has a plan that fits
        by_distance = sorted(range(len(shapes)), key=lambda i: abs(shapes[i].params / n_params - 1))
        naive = None
        for start in range(0, min(len(by_distance), 4 * runner.workers), runner.workers):
            batch = by_distance[start:start + runner.workers]
            evaluate(batch)
            found = [i for i in batch if results[i].feasible]
            if found:
                naive = results[found[0]]
                break
        # k-ary search for the feasibility boundary over shapes sorted by size
        lo, hi = -1, len(shapes)  # ok(lo) (or none), not ok(hi)
        for i in results:
            if ok(i):
                lo = max(lo, i)
        for i in results:
            if not ok(i) and i > lo:
                hi = min(hi, i)
        k = max(2, runner.workers)
        while hi - lo > 1:
            span = hi - lo
            picks = sorted({lo + max(1, round(span * (j + 1) / (k + 1))) for j in range(k)} - {hi})
            picks = [p for p in picks if lo < p < hi] or [lo + 1]
            evaluate(picks)
            for p in picks:
                if ok(p):
                    lo = max(lo, p)
            hi = min([p for p in picks if p > lo and not ok(p)] + [hi])
        # verify: shapes up to verify_margin larger than the answer, by size
        while lo >= 0:
            limit = shapes[lo].params * (1 + verify_margin)
            above = [i for i in range(lo + 1, len(shapes)) if shapes[i].params <= limit and i not in results]
            if not above:
                break
            evaluate(above)
            better = [i for i in above if ok(i)]
            if not better:
                break
            lo = max(better)
    finally:
        if owns:
            runner.close()
    optimal = results[lo] if lo >= 0 else None
    name = tmpl.name
    return PlanResult(budget, n_params, n_tokens, naive, optimal, list(results.values()), len(shapes), no_layout,
                      time.perf_counter() - t0, name)


def _listed_tp(value: Any) -> tuple[int, ...] | None:
    if value in (None, "nvlink", "all"):
        return None
    from trainsim.search.space import parse_values

    parsed = parse_values(value, "tp")
    return parsed if isinstance(parsed, tuple) else None
