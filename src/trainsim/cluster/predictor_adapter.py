"""The one place where the cluster simulator calls trainsim's predictor and search.

Everything the throughput model needs from the rest of trainsim goes through these functions: the best plan for a
GPU count (:func:`best_plan`, trainsim's search), the time of a plan with given tensor and pipeline degrees
(:func:`plan_with`, the same search with those dimensions listed) and the slowdown of a plan when one GPU computes
``factor`` times slower (:func:`straggler_slowdown`, the event engine's ``--slow-rank`` through the cached
:class:`~trainsim.service.Predictor`). Every function takes the software stack by name (``framework``: a preset
``NAME[@version]`` or a profile YAML path, :func:`trainsim.spec.framework.load_framework`); ``None`` is trainsim's
default stack.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypeVar, cast

from trainsim.errors import TrainsimWarning
from trainsim.spec.framework import Framework, load_framework
from trainsim.spec.model import Model
from trainsim.spec.system import System
from trainsim.spec.training import Training

SearchSpaceName = Literal["tdp", "full"]
_F = TypeVar("_F", bound=Callable[..., Any])


def _memo(maxsize: int) -> Callable[[_F], _F]:
    """``functools.lru_cache`` that keeps the function's signature for type checkers (the frozen specs are hashable
    at run time; their pydantic stubs do not say so)."""

    def wrap(fn: _F) -> _F:
        return cast(_F, lru_cache(maxsize=maxsize)(fn))

    return wrap
#: The cluster's ``full`` space besides tensor and pipeline degrees: micro-batch 1, 2 or 4, every recompute mode,
#: the distributed optimizer and sequence parallelism (virtual stages, context/expert parallelism and rank orders are
#: left at their defaults: opening them costs 100-500× more per GPU count, see docs/cluster.md).
FULL_SPACE: dict[str, Any] = {"micro_batch_size": "1,2,4", "recompute": "all", "zero_stage": "1",
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


@lru_cache(maxsize=64)
def framework_of(name: str | None) -> Framework:
    """The resolved framework profile of a name (``None``: trainsim's default), loaded once."""
    return load_framework(name)


def full_space(framework: str | None) -> dict[str, Any]:
    """:data:`FULL_SPACE` within what the stack offers (no distributed optimizer where it has none)."""
    fw = framework_of(framework)
    return {**FULL_SPACE, "zero_stage": str(min(int(FULL_SPACE["zero_stage"]), fw.max_zero_stage))}


def template(training: Training, space: SearchSpaceName) -> Training:
    """The training template of a search space: vTrain's (t, d, p) space fixes micro-batch 1, full recompute and no
    optimizer sharding; ``full`` opens the :data:`FULL_SPACE` dimensions."""
    if space == "tdp":
        return training.model_copy(update={"micro_batch_size": 1, "recompute_granularity": "full",
                                           "zero_stage": 0})
    return training


def _search(model: Model, system: System, training: Training, num_gpus: int, space: SearchSpaceName,
            tp: int | None, pp: int | None, framework: str | None) -> PlanPoint | None:
    from trainsim.search import SearchSpace, search

    dims: dict[str, Any] = {"tp": tp if tp is not None else "all", "pp": pp if pp is not None else "all"}
    if space == "full":
        dims.update(full_space(framework))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        try:
            sp = SearchSpace(model=model, system=system, num_gpus=num_gpus, training=template(training, space),
                             others="default", framework=framework_of(framework), **dims)
            result = search(sp, objective="time", workers=1)
        except ValueError:
            return None
    best = result.best
    if best is None or best.iteration_time_s is None:
        return None
    return PlanPoint(num_gpus, float(best.iteration_time_s), best.tp, best.pp, best.dp, best.micro_batch_size,
                     best.recompute, bool(best.fits), float(best.mfu or 0.0), float(best.peak_memory_bytes))


@_memo(200_000)
def best_plan(model: Model, system: System, training: Training, num_gpus: int,
              space: SearchSpaceName = "tdp", framework: str | None = None) -> PlanPoint | None:
    """The fastest plan that fits on ``num_gpus`` GPUs of ``system`` (``None`` when none fits)."""
    return _cached(model, system, training, num_gpus, space, None, None, framework)


@_memo(200_000)
def plan_with(model: Model, system: System, training: Training, num_gpus: int, tp: int, pp: int,
              space: SearchSpaceName = "tdp", framework: str | None = None) -> PlanPoint | None:
    """The fastest plan with tensor degree ``tp`` and pipeline degree ``pp`` (data parallel fills the rest)."""
    if num_gpus % (tp * pp):
        return None
    return _cached(model, system, training, num_gpus, space, tp, pp, framework)


# ---- persistent cache ------------------------------------------------------------------------------------------------
#: Plan points are pure functions of (model, system, training, GPUs, degrees, space, trainsim's code and presets); they
#: are kept on disk under ``$TRAINSIM_CACHE_DIR`` (default ``~/.cache/trainsim``)/cluster, one JSON file per
#: (model, system, training, space), so a second run of the same workload skips the searches. ``TRAINSIM_CACHE_DIR=off``
#: disables it.
_DISK: dict[str, dict[str, Any]] = {}
_DIRTY: set[str] = set()


@lru_cache(maxsize=1)
def _fingerprint() -> str:
    import hashlib
    from pathlib import Path

    import trainsim

    root = Path(trainsim.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.suffix in (".py", ".json", ".yaml", ".csv") and "cluster" not in f.parts:
            st = f.stat()
            h.update(f"{f.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(repr(sorted(FULL_SPACE.items())).encode())
    return h.hexdigest()[:16]


def _cache_dir() -> object:
    import os
    from pathlib import Path

    env = os.environ.get("TRAINSIM_CACHE_DIR")
    if env == "off":
        return None
    return Path(env) if env else Path.home() / ".cache" / "trainsim"


def _class_key(model: Model, system: System, training: Training, space: str, framework: str | None) -> str:
    import hashlib
    import json

    blob = json.dumps([model.model_dump(mode="json"), system.model_dump(mode="json"),
                       training.model_dump(mode="json"), space, _fingerprint(),
                       framework_of(framework).model_dump(mode="json")], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _cached(model: Model, system: System, training: Training, num_gpus: int, space: SearchSpaceName,
            tp: int | None, pp: int | None, framework: str | None) -> PlanPoint | None:
    root = _cache_dir()
    if root is None:
        return _search(model, system, training, num_gpus, space, tp, pp, framework)
    import json
    from pathlib import Path

    key = _class_key(model, system, training, space, framework)
    table = _DISK.get(key)
    if table is None:
        path = Path(str(root)) / "cluster" / f"{key}.json"
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            table = {}
        _DISK[key] = table
    item = f"{num_gpus}|{tp}|{pp}"
    if item in table:
        row = table[item]
        return None if row is None else PlanPoint(*row)  # type: ignore[arg-type]
    p = _search(model, system, training, num_gpus, space, tp, pp, framework)
    table[item] = None if p is None else list(p)
    _DIRTY.add(key)
    return p


def flush_cache() -> None:
    """Write the new plan points to the disk cache (atomically; errors are ignored: the cache is an optimisation)."""
    root = _cache_dir()
    if root is None or not _DIRTY:
        return
    import json
    from pathlib import Path

    from trainsim.io.atomic import write_text_atomic

    folder = Path(str(root)) / "cluster"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for key in sorted(_DIRTY):
            write_text_atomic(folder / f"{key}.json", json.dumps(_DISK[key], sort_keys=True))
    except OSError:
        return
    _DIRTY.clear()


@_memo(4096)
def straggler_slowdown(model: Model, system: System, training: Training, point: PlanPoint, factor: float,
                       framework: str | None = None) -> float:
    """Iteration-time ratio when one GPU of the plan computes ``factor`` times slower: the event engine's
    ``--slow-rank 0=FACTOR`` over the same engine without it (through the cached :class:`~trainsim.service.Predictor`).
    """
    if factor == 1.0:
        return 1.0
    from trainsim.spec.job import Job
    from trainsim.spec.parallelism import Parallelism

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainsimWarning)
        tr = training.model_copy(update={"micro_batch_size": point.micro_batch_size,
                                         "recompute_granularity": point.recompute})
        job = Job(model=model, system=system, parallelism=Parallelism(tp=point.tp, pp=point.pp), training=tr,
                  num_gpus=point.num_gpus, framework=framework_of(framework))
        slow = _event_predictor(factor).metrics(job).iteration_time_s
        base = _event_predictor(1.0).metrics(job).iteration_time_s
    return float(slow / base)


@lru_cache(maxsize=64)
def _event_predictor(factor: float) -> Any:
    from trainsim.service import Predictor

    return Predictor("event", slow_rank={0: factor}) if factor != 1.0 else Predictor("event")
