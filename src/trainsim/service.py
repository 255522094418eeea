"""The evaluate-a-job service for applications: a cached :class:`Predictor` returning frozen :class:`Metrics`.

>>> from trainsim.service import Predictor                                   # doctest: +SKIP
>>> metrics = Predictor(engine="analytic").metrics(job)                     # doctest: +SKIP
>>> metrics.iteration_time_s, metrics.mfu, metrics.fits, metrics.cost_per_iteration_usd   # doctest: +SKIP

``predict``, ``search``, ``plan`` and the cluster simulator compute throughput, MFU/HFU, memory fit and cost through
the same owner (:mod:`trainsim.metrics`); :class:`Predictor` adds a per-instance cache keyed on the job's full
configuration, so evaluating the same job twice (a scheduler re-planning the same queue) costs a dictionary lookup.
The API is stable: :meth:`Predictor.metrics` (fast, typed), :meth:`Predictor.predict` (the full
:class:`~trainsim.predictor.Prediction`, also cached) and :meth:`Metrics.training` for a token budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trainsim.errors import TrainsimError
from trainsim.metrics import TrainingRun, cost_per_iteration, training_run

if TYPE_CHECKING:
    from trainsim.cost.calibration import Calibration
    from trainsim.predictor import Prediction
    from trainsim.spec.job import Job
    from trainsim.workload.flops import FlopsConvention

Engine = Literal["analytic", "event"]


@dataclass(frozen=True)
class Metrics:
    """What an application needs to know about one job. Seconds, bytes, FLOP, USD."""

    engine: str
    num_gpus: int
    num_nodes: int
    iteration_time_s: float
    tokens_per_iteration: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    hfu: float
    bubble_fraction: float
    peak_memory_bytes: float
    capacity_bytes: float
    fits: bool
    price_per_gpu_hour: float
    cost_per_iteration_usd: float
    breakdown_s: tuple[tuple[str, float], ...] = field(default=())

    @property
    def breakdown(self) -> dict[str, float]:
        """Exposed time per category (sums to the iteration time)."""
        return dict(self.breakdown_s)

    def training(self, tokens: float, price_per_gpu_hour: float | None = None) -> TrainingRun:
        """Days, GPU-hours and dollars to train on ``tokens`` tokens at this speed."""
        price = self.price_per_gpu_hour if price_per_gpu_hour is None else price_per_gpu_hour
        return training_run(tokens, self.tokens_per_iteration, self.iteration_time_s, self.num_gpus, price)

    def seconds_for(self, iterations: float) -> float:
        """Wall-clock seconds for ``iterations`` iterations."""
        return iterations * self.iteration_time_s

    @classmethod
    def of(cls, prediction: Prediction, job: Job) -> Metrics:
        """The metrics of a full prediction."""
        price = job.system.price_per_gpu_hour
        return cls(
            engine=prediction.engine, num_gpus=job.world_size, num_nodes=job.num_nodes,
            iteration_time_s=prediction.iteration_time_s, tokens_per_iteration=job.tokens_per_iteration,
            tokens_per_s=prediction.tokens_per_s, tokens_per_s_per_gpu=prediction.tokens_per_s_per_gpu,
            model_tflops_per_gpu=prediction.model_tflops_per_gpu, mfu=prediction.mfu, hfu=prediction.hfu,
            bubble_fraction=prediction.bubble_fraction, peak_memory_bytes=prediction.memory.peak_bytes,
            capacity_bytes=prediction.memory.capacity_bytes, fits=prediction.memory.fits,
            price_per_gpu_hour=price,
            cost_per_iteration_usd=cost_per_iteration(prediction.iteration_time_s, job.world_size, price),
            breakdown_s=tuple(prediction.breakdown_s.items()),
        )


class Predictor:
    """Evaluates jobs with one engine and calibration, caching results per job configuration.

    ``engine``: ``"analytic"`` (closed form, microseconds to milliseconds) or ``"event"`` (the event engine);
    ``engine_options`` go to the event engine (e.g. ``stragglers``). ``cache_size`` bounds the number of cached
    jobs (least recently used are dropped); 0 disables the cache. Instances are cheap; not thread-safe.
    """

    def __init__(self, engine: Engine = "analytic", *, calibration: Calibration | None = None,
                 flops_convention: FlopsConvention = "megatron", cache_size: int = 4096,
                 **engine_options: Any) -> None:
        if engine not in ("analytic", "event"):
            raise TrainsimError("engine", f"unknown engine {engine!r}", "use 'analytic' or 'event'")
        if cache_size < 0:
            raise TrainsimError("cache_size", f"must be ≥ 0 (got {cache_size})", "give 0 to disable the cache")
        self.engine: Engine = engine
        self.calibration = calibration
        self.flops_convention: FlopsConvention = flops_convention
        self.engine_options = engine_options
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Prediction] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(job: Job) -> str:
        """The cache key of a job (its full configuration)."""
        return job.model_dump_json()

    def predict(self, job: Job) -> Prediction:
        """The full :class:`~trainsim.predictor.Prediction` of ``job`` (cached)."""
        from trainsim.predictor import predict

        k = self.key(job) if self.cache_size else ""
        if self.cache_size and k in self._cache:
            self.hits += 1
            self._cache.move_to_end(k)
            return self._cache[k]
        self.misses += 1
        out = predict(job, self.engine, calibration=self.calibration, flops_convention=self.flops_convention,
                      **self.engine_options)
        if self.cache_size:
            self._cache[k] = out
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def metrics(self, job: Job) -> Metrics:
        """The :class:`Metrics` of ``job`` (cached)."""
        return Metrics.of(self.predict(job), job)

    def clear(self) -> None:
        """Drop the cache."""
        self._cache.clear()
