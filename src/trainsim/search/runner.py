"""``trainsim.search.search``: enumerate a design space, evaluate it on a backend, rank, refine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainsim.search.backends import Backend, chunked, get_backend
from trainsim.search.evaluate import EvalContext, evaluate_chunk, make_candidate
from trainsim.search.objectives import pareto_front, rank, resolve_objective
from trainsim.search.refine import refine as refine_top
from trainsim.search.refine import require_event_engine
from trainsim.search.result import SearchResult
from trainsim.search.space import SearchSpace, enumerate_space

if TYPE_CHECKING:
    from trainsim.cost.calibration import Calibration

#: Below this many candidates the local backend evaluates in process (a pool would cost more than it saves).
SERIAL_BELOW = 400

ProgressCallback = Callable[[str, int, int], None]  # (phase, done, total)


def search(space: SearchSpace, *, objective: str | None = None, deadline_days: float | None = None,
           include_unfit: bool = False, refine: int = 0, backend: str | Backend = "local",
           workers: int | None = None, price_per_gpu_hour: float | None = None,
           calibration: Calibration | None = None, progress: ProgressCallback | None = None) -> SearchResult:
    """Search ``space`` for the best plans.

    ``objective``: ``time`` (iteration), ``training-time``, ``cost`` or ``gpus`` (see
    :mod:`trainsim.search.objectives`); ``deadline_days`` constrains the ranking; ``include_unfit`` ranks
    configurations that do not fit in memory too (and estimates their time); ``refine`` re-predicts the best ``refine``
    with the event engine. ``backend`` is ``local`` (process pool of ``workers``; in process for small spaces unless
    ``workers`` is given) or ``ray``, or a :class:`~trainsim.search.backends.Backend`; results are identical on every
    backend. ``price_per_gpu_hour`` overrides the system's price. ``progress(phase, done, total)`` is called as
    candidates finish (phase ``"analytic"`` then ``"event"``).
    """
    train_tokens = space.training.train_tokens
    name = resolve_objective(objective, deadline_days, train_tokens)
    if refine < 0:
        from trainsim.errors import TrainsimError

        raise TrainsimError("refine", f"must be 0 or more (got {refine})", "give the number of candidates to refine")
    if refine:
        require_event_engine()
    price = space.system.price_per_gpu_hour if price_per_gpu_hour is None else price_per_gpu_hour
    if price < 0:
        from trainsim.errors import TrainsimError

        raise TrainsimError("price_per_gpu_hour", f"must not be negative (got {price})", "give USD per GPU-hour")

    t0 = time.perf_counter()
    enum = enumerate_space(space)
    t_enum = time.perf_counter() - t0
    ctx = EvalContext(space.model, space.system, space.training, space.first_stage_layers, space.last_stage_layers,
                      price, train_tokens, include_unfit, calibration, framework=space.framework)

    owns = not isinstance(backend, Backend)
    if isinstance(backend, Backend):
        runner = backend
    else:
        small = workers is None and len(enum.candidates) < SERIAL_BELOW and backend == "local"
        runner = get_backend(backend, 1 if small else workers)
    try:
        specs = enum.candidates
        chunks = chunked(specs, runner.workers)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress("analytic", done[0], len(specs))

        if progress is not None:
            progress("analytic", 0, len(specs))
        t1 = time.perf_counter()
        results = [r for chunk in runner.map(evaluate_chunk, ctx, chunks, tick) for r in chunk]
        t_eval = time.perf_counter() - t1
        candidates = [make_candidate(i, spec, res, ctx) for i, (spec, res) in enumerate(zip(specs, results,
                                                                                                strict=True))]
        ranking = rank(candidates, name, include_unfit, deadline_days)
        refinement = None
        t_refine = 0.0
        if refine and ranking:
            t2 = time.perf_counter()
            done_e = [0]

            def tick_e(n: int) -> None:
                done_e[0] += n
                if progress is not None:
                    progress("event", done_e[0], min(refine, len(ranking)))

            if progress is not None:
                progress("event", 0, min(refine, len(ranking)))
            ranking, refinement = refine_top(candidates, ranking, refine, ctx, name, include_unfit, deadline_days,
                                             runner, tick_e)
            t_refine = time.perf_counter() - t2
    finally:
        if owns:
            runner.close()
    front = pareto_front(candidates, include_unfit)
    elapsed = time.perf_counter() - t0
    stats = {
        "estimated": sum(1 for c in candidates if c.estimated),
        "backend": runner.name,
        "workers": runner.workers,
        "seconds": elapsed,
        "enumeration_seconds": t_enum,
        "evaluation_seconds": t_eval,
        "refinement_seconds": t_refine,
        "candidates_per_s": len(candidates) / t_eval if t_eval > 0 else None,
        "capacity_bytes": space.system.gpu.hbm_capacity,
    }
    space_desc = space.describe()
    return SearchResult(
        objective=name, candidates=candidates, ranking=ranking, pareto=front, skipped=dict(enum.skipped),
        skipped_examples=enum.skipped_examples, equivalent=enum.equivalent, warnings=dict(enum.warnings),
        space=space_desc, train_tokens=train_tokens, deadline_days=deadline_days, include_unfit=include_unfit,
        price_per_gpu_hour=price, stats=stats, refinement=refinement,
    )
