"""Throughput model: iteration time of a job on N GPUs of a pool, for a placement, from trainsim's predictor.

Sources (``--throughput``):

- ``best``: the fastest plan trainsim's search finds for every GPU count (``--search-space tdp``: vTrain's (t, d, p)
  space with micro-batch 1 and full recomputation; ``full``: every dimension);
- ``dp-only``: ElasticFlow's view: the smallest tensor × pipeline product that fits (tensor inside a node first),
  then data-parallel scaling only (GPU counts that are not a multiple of it are not usable);
- ``fixed``: the plan of the trace's ``plan`` column (t/p degrees; data parallel fills the allocation);
- ``table:DIR``: imported curves (CSV files with ``model, global_batch_size, num_gpus, iteration_time_s``).

Placement: a job spread over partial nodes is priced on that shape (the GPUs per node of the pricing system are the
greatest common divisor of the GPUs it holds on each node, with the node's NICs scaled alike), and re-planned when
its allocation changes. Curves over the pool's GPU counts (powers of two and the job's own sizes) are computed once
per (model, batch, sequence, plan, pool) and memoised as numpy arrays. The grid is 2^k and 3·2^k GPUs (times the
tensor × pipeline unit for ``dp-only`` and ``fixed``; ``best`` also gets ``dp-only``'s sizes, so at every size
``dp-only`` can use, ``best`` is at least as fast: its search space contains the DP-only plan).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainsim.cluster import predictor_adapter as pa
from trainsim.cluster.spec import Pool
from trainsim.cluster.trace import JobSpec, records
from trainsim.errors import TrainsimError
from trainsim.spec.model import Model
from trainsim.spec.system import System
from trainsim.spec.training import Training

SOURCES = ("best", "dp-only", "fixed", "table")
#: Bytes per parameter written by a checkpoint: bf16 weights (2) + fp32 master weights, Adam m and v (12).
CHECKPOINT_BYTES_PER_PARAM = 14.0

JobKey = tuple[str, int, int | None, tuple[int, int] | None, str | None]


def job_key(job: JobSpec) -> JobKey:
    """What the throughput of a job depends on (besides the GPUs): model, batch, sequence, fixed plan, framework."""
    return (job.model, job.global_batch_size, job.seq_length, job.plan, job.framework)


@dataclass(frozen=True)
class Curve:
    """Iteration time over GPU counts for one job class on one pool (compact placement).

    ``sizes`` ascending; ``times[i]`` is ``inf`` where no plan fits. ``usable`` marks sizes whose time is strictly
    below every smaller usable size (the only sizes an elastic policy should pick).
    """

    sizes: np.ndarray
    times: np.ndarray
    points: tuple[pa.PlanPoint | None, ...]

    @property
    def fits(self) -> np.ndarray:
        """Boolean mask: a plan fits at this size."""
        return np.isfinite(self.times)

    @property
    def min_size(self) -> int | None:
        """Smallest size with a fitting plan."""
        idx = np.flatnonzero(self.fits)
        return int(self.sizes[idx[0]]) if idx.size else None

    @property
    def usable(self) -> np.ndarray:
        """Sizes that are faster than every smaller size."""
        best = np.minimum.accumulate(np.concatenate(([np.inf], self.times)))[:-1]
        return self.times < best

    def time_at(self, n: int) -> float:
        """Iteration time at exactly ``n`` GPUs (``inf`` when ``n`` is not on the curve or nothing fits)."""
        i = int(np.searchsorted(self.sizes, n))
        if i < len(self.sizes) and self.sizes[i] == n:
            return float(self.times[i])
        return math.inf


def pow2_sizes(limit: int) -> list[int]:
    """1, 2, 4, … up to ``limit``."""
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def grid_sizes(limit: int) -> list[int]:
    """The GPU counts a curve is computed on: 1, 2, 3, 4, 6, 8, 12, 16, 24, … (2^k and 3·2^k) up to ``limit``."""
    return sorted({n for n in pow2_sizes(limit)} | {3 * n for n in pow2_sizes(limit // 3)})


def shaped_system(system: System, gpus_per_node: int) -> System:
    """``system`` with fewer GPUs per node (a partial-node placement), its NICs scaled to the GPUs used."""
    gpn = system.node.gpus_per_node
    if gpus_per_node >= gpn:
        return system
    nics = max(1, round(system.network.nics_per_node * gpus_per_node / gpn))
    return system.replace(node=system.node.replace(gpus_per_node=gpus_per_node),
                          network=system.network.replace(nics_per_node=nics))


@dataclass
class OverheadModel:
    """Cost of a (re)start or resize, in seconds of the job's allocation.

    ``checkpoint``: save and load of weights and optimizer states (:data:`CHECKPOINT_BYTES_PER_PARAM` per parameter)
    at ``storage_bandwidth`` bytes/s (aggregate), plus ``restart_s``; ``constant``: ``restart_s``; ``none``: zero.
    """

    kind: str = "checkpoint"
    storage_bandwidth: float = 10e9
    restart_s: float = 30.0

    def __post_init__(self) -> None:
        if self.kind not in ("checkpoint", "constant", "none"):
            raise TrainsimError("--resize-overhead", f"unknown overhead model {self.kind!r}",
                                "use checkpoint, constant or none")

    def seconds(self, model: Model, first_start: bool) -> float:
        """Seconds of overhead when a job (re)starts; the first start loads nothing from a checkpoint."""
        if self.kind == "none":
            return 0.0
        if self.kind == "constant":
            return 0.0 if first_start else self.restart_s
        if first_start:
            return 0.0
        return 2.0 * model.num_params * CHECKPOINT_BYTES_PER_PARAM / self.storage_bandwidth + self.restart_s


@dataclass
class ThroughputModel:
    """Iteration times from trainsim for every (job class, pool, GPU count, placement shape), memoised."""

    source: str = "best"
    space: pa.SearchSpaceName = "tdp"
    table_dir: str | None = None
    #: software stack of jobs whose trace row names none (``None``: trainsim's default, megatron-core)
    framework: str | None = None
    _models: dict[str, Model] = field(default_factory=dict)
    _curves: dict[tuple[JobKey, str, tuple[int, ...]], Curve] = field(default_factory=dict)
    _points: dict[tuple[JobKey, str, int, int], pa.PlanPoint | None] = field(default_factory=dict)
    _dp_base: dict[tuple[JobKey, str], tuple[int, int] | None] = field(default_factory=dict)
    _table: dict[tuple[str, int], dict[int, float]] | None = None

    @classmethod
    def parse(cls, text: str, space: str = "tdp", framework: str | None = None) -> ThroughputModel:
        """From the CLI form: ``best``, ``dp-only``, ``fixed`` or ``table:DIR``; ``framework`` is the default
        software stack (a preset ``NAME[@version]`` or a profile YAML; checked here)."""
        if space not in ("tdp", "full"):
            raise TrainsimError("--search-space", f"unknown search space {space!r}", "use tdp or full")
        if framework is not None:
            try:
                pa.framework_of(framework)
            except TrainsimError as exc:
                raise TrainsimError("--framework", exc.message, exc.hint) from None
        if text.startswith("table:"):
            return cls(source="table", space=space, table_dir=text[len("table:"):],  # type: ignore[arg-type]
                       framework=framework)
        if text not in ("best", "dp-only", "fixed"):
            raise TrainsimError("--throughput", f"unknown source {text!r}", "use best, dp-only, fixed or table:DIR")
        return cls(source=text, space=space, framework=framework)  # type: ignore[arg-type]

    def framework_of(self, job: JobSpec) -> str | None:
        """The software stack of a job: its trace's ``framework``, else the model's default."""
        return job.framework if job.framework is not None else self.framework

    # ---- inputs -------------------------------------------------------------------------------------------------
    def model(self, name: str) -> Model:
        """The model of a job (resolved once)."""
        m = self._models.get(name)
        if m is None:
            from trainsim.spec.presets import load_model

            m = self._models[name] = load_model(name)
        return m

    @staticmethod
    def training(job: JobSpec) -> Training:
        """The training template of a job."""
        return Training(global_batch_size=job.global_batch_size, seq_length=job.seq_length)

    def tokens_per_iteration(self, job: JobSpec) -> int:
        """Tokens per iteration (global batch × sequence)."""
        return job.global_batch_size * (job.seq_length or self.model(job.model).seq_length)

    # ---- points -------------------------------------------------------------------------------------------------
    def _dp_only_base(self, job: JobSpec, pool: Pool) -> tuple[int, int] | None:
        """ElasticFlow's view of a model that needs model parallelism: the smallest tensor × pipeline product that
        fits, both degrees powers of two (ElasticFlow allocates power-of-two GPU counts and scales data parallelism
        by powers of two, so any other product would leave GPUs of every allocation idle), tensor inside a node
        first (among equal products the largest tensor degree, Megatron's rule), tensor dividing the heads and
        pipeline the layers; it must fit with data parallelism too (k = 1 and 2 replicas)."""
        key = (job_key(job), pool.name)
        if key not in self._dp_base:
            model, system = self.model(job.model), pool.resolved_system
            gpn = system.node.gpus_per_node
            fw = self.framework_of(job)
            options = [(tp * pp, -tp, tp, pp)
                       for tp in pow2_sizes(gpn) if model.num_attention_heads % tp == 0
                       for pp in pow2_sizes(model.num_layers) if model.num_layers % pp == 0]
            found = None
            for _, _, tp, pp in sorted(options):
                ok = all((p := pa.plan_with(model, system, self.training(job), k * tp * pp, tp, pp, self.space,
                                            fw)) is not None and p.fits for k in (1, 2))
                if ok:
                    found = (tp, pp)
                    break
            self._dp_base[key] = found
        return self._dp_base[key]

    def point(self, job: JobSpec, pool: Pool, n: int, gpus_per_node: int | None = None) -> pa.PlanPoint | None:
        """The plan and time of ``job`` on ``n`` GPUs of ``pool`` placed with ``gpus_per_node`` GPUs per node
        (default: compact). ``None`` when no plan fits."""
        gpn = pool.gpn if gpus_per_node is None else min(gpus_per_node, pool.gpn)
        gpn = min(gpn, n) if n < pool.gpn else gpn
        key = (job_key(job), pool.name, n, gpn)
        if key in self._points:
            return self._points[key]
        model, training = self.model(job.model), self.training(job)
        system = shaped_system(pool.resolved_system, gpn)
        p: pa.PlanPoint | None
        fw = self.framework_of(job)
        if self.source == "best":
            p = pa.best_plan(model, system, training, n, self.space, fw)
        elif self.source == "dp-only":
            base = self._dp_only_base(job, pool)
            p = None if base is None else pa.plan_with(model, system, training, n, base[0], base[1], self.space, fw)
            if p is not None and base is not None and base[0] > gpn:
                p = None
        elif self.source == "fixed":
            if job.plan is None:
                raise TrainsimError(f"trace job {job.job_id}, plan", "is empty but --throughput fixed needs it",
                                    "give every job a plan such as t2p4, or use --throughput best")
            p = pa.plan_with(model, system, training, n, job.plan[0], job.plan[1], self.space, fw)
        else:
            p = self._table_point(job, n)
        if p is not None and not p.fits:
            p = None
        self._points[key] = p
        return p

    def unit(self, job: JobSpec, pool: Pool) -> int:
        """The GPU count that data parallelism multiplies for ``dp-only`` and ``fixed`` (1 for the others)."""
        if self.source == "dp-only":
            base = self._dp_only_base(job, pool)
            return 1 if base is None else base[0] * base[1]
        if self.source == "fixed" and job.plan is not None:
            return job.plan[0] * job.plan[1]
        return 1

    def iteration_time(self, job: JobSpec, pool: Pool, n: int, gpus_per_node: int | None = None) -> float:
        """Seconds per iteration (``inf`` when nothing fits)."""
        p = self.point(job, pool, n, gpus_per_node)
        return math.inf if p is None else p.iteration_time_s

    def curve(self, job: JobSpec, pool: Pool, extra_sizes: Iterable[int] = ()) -> Curve:
        """Iteration time over the pool's :func:`grid_sizes` (times the ``dp-only``/``fixed`` unit) and
        ``extra_sizes``, compact placement."""
        unit = self.unit(job, pool)
        native = {unit * k for k in grid_sizes(pool.num_gpus // unit)}
        if self.source == "best":  # a superset of dp-only's sizes, so the best plan dominates it at every size
            base = self._dp_only_base(job, pool)
            if base is not None:
                native |= {base[0] * base[1] * k for k in grid_sizes(pool.num_gpus // (base[0] * base[1]))}
        native |= {s for s in extra_sizes if 0 < s <= pool.num_gpus}
        sizes = tuple(sorted(native))
        key = (job_key(job), pool.name, sizes)
        c = self._curves.get(key)
        if c is None:
            pts = tuple(self.point(job, pool, n) for n in sizes)
            times = np.array([math.inf if p is None else p.iteration_time_s for p in pts])
            c = self._curves[key] = Curve(np.array(sizes, dtype=np.int64), times, pts)
        return c

    def slowdown(self, job: JobSpec, pool: Pool, point: pa.PlanPoint, factor: float) -> float:
        """Iteration-time ratio of ``point`` with one GPU ``factor``× slower (the event engine's ``--slow-rank``)."""
        if self.source == "table":
            return factor
        return pa.straggler_slowdown(self.model(job.model), pool.resolved_system, self.training(job), point, factor,
                                     self.framework_of(job))

    # ---- tables -------------------------------------------------------------------------------------------------
    def _load_table(self) -> dict[tuple[str, int], dict[int, float]]:
        import pandas as pd

        if self._table is None:
            assert self.table_dir is not None
            root = Path(self.table_dir)
            files = sorted(root.glob("*.csv")) if root.is_dir() else [root]
            if not files or not files[0].exists():
                raise TrainsimError("--throughput", f"no curve files in '{root}'",
                                    "give table:DIR with CSV files written by `trainsim cluster curves --format csv`")
            table: dict[tuple[str, int], dict[int, float]] = {}
            for f in files:
                df = pd.read_csv(f)
                need = {"model", "global_batch_size", "num_gpus", "iteration_time_s"}
                if not need <= set(df.columns):
                    raise TrainsimError(f"--throughput {f}", f"needs columns {sorted(need)}",
                                        "write it with `trainsim cluster curves --format csv`")
                for r in records(df):
                    t = float(r.iteration_time_s)
                    if math.isfinite(t) and t > 0:
                        table.setdefault((str(r.model), int(r.global_batch_size)), {})[int(r.num_gpus)] = t
            self._table = table
        return self._table

    def _table_point(self, job: JobSpec, n: int) -> pa.PlanPoint | None:
        row = self._load_table().get((job.model, job.global_batch_size))
        if row is None:
            raise TrainsimError(f"trace job {job.job_id}, model", f"no curve for {job.model} at batch "
                                f"{job.global_batch_size} in {self.table_dir}", "add it to the table")
        t = row.get(n)
        if t is None:
            return None
        return pa.PlanPoint(n, t, 0, 0, 0, 0, "", True, 0.0, 0.0)
