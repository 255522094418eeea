"""The one place where the cluster simulator calls trainsim's predictor and search.

Everything the throughput model needs from the rest of trainsim goes through these functions: the best plan for a
GPU count (:func:`best_plan`, trainsim's search), the time of a plan with given tensor and pipeline degrees
(:func:`plan_with`, the same search with those dimensions listed) and the slowdown of a plan when one GPU computes
``factor`` times slower (:func:`straggler_slowdown`, the event engine's ``--slow-rank``). When the cached typed
predictor service lands, switching to it is an edit of this module only.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Literal, NamedTuple

from trainsim.errors import TrainsimWarning
from trainsim.spec.model import Model
from trainsim.spec.system import System
from trainsim.spec.training import Training

SearchSpaceName = Literal["tdp", "full"]
#: The cluster's ``full`` space besides tensor and pipeline degrees: micro-batch 1, 2 or 4, every recompute mode,
#: the distributed optimizer and sequence parallelism (virtual stages, context/expert parallelism and rank orders are
#: left at their defaults: opening them costs 100-500× more per GPU count, see docs/cluster.md).
FULL_SPACE: dict[str, object] = {"micro_batch_size": "1,2,4", "recompute": "all", "zero_stage": "1",
                                 "sequence_parallel": "true"}


class PlanPoint(NamedTuple):
    """One plan at one GPU count: its iteration time (s), degrees, memory fit and MFU."""

    num_gpus: int
    iteration_time_s: float
    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    recompute: str
    fits: bool
    mfu: float
    peak_memory_bytes: float

    @property
    def plan(self) -> str:
        """Compact plan text ``t2p4d8`` (tensor, pipeline, data degrees)."""
        return f"t{self.tp}p{self.pp}d{self.dp}"


def template(training: Training, space: SearchSpaceName) -> Training:
    """The training template of a search space: vTrain's (t, d, p) space fixes micro-batch 1, full recompute and no
    optimizer sharding; ``full`` opens the :data:`FULL_SPACE` dimensions."""
    if space == "tdp":
        return training.model_copy(update={"micro_batch_size": 1, "recompute_granularity": "full",
                                           "zero_stage": 0})
    return training


def _search(model: Model, system: System, training: Training, num_gpus: int, space: SearchSpaceName,
            tp: int | None, pp: int | None) -> PlanPoint | None:
    from trainsim.search import SearchSpace, search

    dims: dict[str, object] = {"tp": tp if tp is not None else "all", "pp": pp if pp is not None else "all"}
    if space == "full":
        dims.update(FULL_SPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        try:
            sp = SearchSpace(model=model, system=system, num_gpus=num_gpus, training=template(training, space),
                             others="default", **dims)
            result = search(sp, objective="time", workers=1)
        except ValueError:
            return None
    best = result.best
    if best is None or best.iteration_time_s is None:
        return None
    return PlanPoint(num_gpus, float(best.iteration_time_s), best.tp, best.pp, best.dp, best.micro_batch_size,
                     best.recompute, bool(best.fits), float(best.mfu or 0.0), float(best.peak_memory_bytes))


@lru_cache(maxsize=200_000)
def best_plan(model: Model, system: System, training: Training, num_gpus: int,
              space: SearchSpaceName = "tdp") -> PlanPoint | None:
    """The fastest plan that fits on ``num_gpus`` GPUs of ``system`` (``None`` when none fits)."""
    return _search(model, system, training, num_gpus, space, None, None)


@lru_cache(maxsize=200_000)
def plan_with(model: Model, system: System, training: Training, num_gpus: int, tp: int, pp: int,
              space: SearchSpaceName = "tdp") -> PlanPoint | None:
    """The fastest plan with tensor degree ``tp`` and pipeline degree ``pp`` (data parallel fills the rest)."""
    if num_gpus % (tp * pp):
        return None
    return _search(model, system, training, num_gpus, space, tp, pp)


@lru_cache(maxsize=4096)
def straggler_slowdown(model: Model, system: System, training: Training, point: PlanPoint, factor: float) -> float:
    """Iteration-time ratio when one GPU of the plan computes ``factor`` times slower (event engine, rank 0)."""
    if factor == 1.0:
        return 1.0
    from trainsim.predictor import predict
    from trainsim.spec.job import Job
    from trainsim.spec.parallelism import Parallelism

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        tr = training.model_copy(update={"micro_batch_size": point.micro_batch_size,
                                         "recompute_granularity": point.recompute})
        job = Job(model=model, system=system, parallelism=Parallelism(tp=point.tp, pp=point.pp), training=tr,
                  num_gpus=point.num_gpus)
        pred = predict(job, engine="event", slow_rank={0: factor})
    info = (pred.model_extra or {}).get("stragglers") or {}
    return float(info.get("slowdown", 1.0))
