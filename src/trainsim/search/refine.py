"""Second tier: re-predict the best candidates with the event engine and report whether the ranking changes."""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainsim.errors import TrainsimError, TrainsimWarning
from trainsim.estimate import BREAKDOWN_KEYS
from trainsim.search.evaluate import Candidate, EvalContext
from trainsim.search.objectives import eligible, sort_key
from trainsim.search.space import CandidateSpec

if TYPE_CHECKING:
    from trainsim.search.backends import Backend, Progress


def event_engine_problem() -> str | None:
    """Why the discrete-event engine (``trainsim.engine.simulate_job``, what ``predict(engine="event")`` runs) cannot
    be used, or ``None`` when it can."""
    if importlib.util.find_spec("trainsim.engine") is None:
        return "trainsim.engine is not installed"
    try:
        module = importlib.import_module("trainsim.engine")
    except Exception as exc:  # a broken or partial engine is not an available one
        return f"importing trainsim.engine failed ({type(exc).__name__}: {exc})"
    if not callable(getattr(module, "simulate_job", None)):
        return "trainsim.engine has no simulate_job yet"
    return None


def event_engine_available() -> bool:
    """Whether the event engine can be used."""
    return event_engine_problem() is None


def require_event_engine() -> None:
    """Raise a clear error when the event engine is missing."""
    if not event_engine_available():
        raise TrainsimError("refine", f"refinement needs the event engine: {event_engine_problem()}",
                            "drop --refine, or use a trainsim with the event engine (predict --engine event)")


def refine_chunk(ctx: EvalContext, specs: list[CandidateSpec]) -> list[tuple[Any, ...]]:
    """Event-engine ``(time, mfu, hfu, breakdown)`` of each candidate."""
    from trainsim.predictor import predict

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        for spec in specs:
            p = predict(ctx.job(spec), engine="event", calibration=ctx.calibration)
            breakdown = tuple(p.breakdown_s.get(k, 0.0) for k in BREAKDOWN_KEYS)
            out.append((p.iteration_time_s, p.mfu, p.hfu, breakdown))
    return out


@dataclass
class Refinement:
    """What the event engine changed among the best ``k`` candidates."""

    k: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    changed: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return {"engine": "event", "k": self.k, "ranking_changed": self.changed, "rows": self.rows,
                "notes": self.notes}


def refine(candidates: list[Candidate], ranking: list[int], k: int, ctx: EvalContext, objective: str,
           include_unfit: bool, deadline_days: float | None, backend: Backend,
           progress: Progress | None = None) -> tuple[list[int], Refinement]:
    """Re-predict the best ``k`` ranked candidates with the event engine; return the new ranking and a report.

    The refined candidates are re-ordered among themselves by their event-engine metrics and stay ahead of the
    unrefined ones (dropped if they no longer meet the deadline); a note says when a refined one became slower than
    the best unrefined candidate (a larger ``k`` would then be worth it).
    """
    require_event_engine()
    top = ranking[:k]
    report = Refinement(k=len(top))
    if not top:
        return ranking, report
    specs = [candidates[i].spec for i in top]
    chunks = [specs[i:i + 1] for i in range(len(specs))]
    results = [r for chunk in backend.map(refine_chunk, ctx, chunks, progress) for r in chunk]
    tokens = ctx.training.global_batch_size * (ctx.training.seq_length or ctx.model.seq_length)
    for i, (t, mfu, hfu, breakdown) in zip(top, results, strict=True):
        c = candidates[i]
        c.analytic_iteration_time_s = c.iteration_time_s
        c.set_time(t, mfu, hfu, tokens, ctx.train_tokens, ctx.price_per_gpu_hour)
        c.breakdown = breakdown
        c.engine = "event"
    key = sort_key(objective)
    kept = [i for i in top if eligible(candidates[i], include_unfit, deadline_days)]
    reranked = sorted(kept, key=lambda i: key(candidates[i]))
    rest = ranking[k:]
    new_ranking = reranked + rest
    for new_pos, i in enumerate(reranked):
        c = candidates[i]
        report.rows.append({
            "index": c.index, "plan": c.plan(), "analytic_rank": top.index(i) + 1, "refined_rank": new_pos + 1,
            "analytic_iteration_time_s": c.analytic_iteration_time_s, "event_iteration_time_s": c.iteration_time_s,
            "relative_difference": (c.iteration_time_s - c.analytic_iteration_time_s) / c.analytic_iteration_time_s
            if c.iteration_time_s and c.analytic_iteration_time_s else None,
        })
    dropped = [i for i in top if i not in kept]
    for i in dropped:
        c = candidates[i]
        report.rows.append({"index": c.index, "plan": c.plan(), "analytic_rank": top.index(i) + 1,
                            "refined_rank": None, "analytic_iteration_time_s": c.analytic_iteration_time_s,
                            "event_iteration_time_s": c.iteration_time_s, "relative_difference": None})
        report.notes.append(f"{c.plan()} no longer meets the deadline with the event engine")
    report.changed = reranked != top
    if rest and reranked and key(candidates[reranked[-1]]) > key(candidates[rest[0]]):
        report.notes.append("a refined candidate is now behind the best unrefined one (analytic estimate): "
                            "a larger --refine would check more candidates")
    return new_ranking, report
