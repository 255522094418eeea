"""Multi-tenant GPU cluster scheduling with plan-aware throughput (``trainsim cluster``).

>>> from trainsim.cluster import simulate
>>> jobs, allocations, metrics = simulate("trace.csv", "dgx-a100:128", policy="elasticflow",
...                                       throughput="best", seed=0)          # doctest: +SKIP

A trace (:mod:`~trainsim.cluster.trace`) of training jobs runs on a cluster (:mod:`~trainsim.cluster.spec`) under a
policy (:mod:`~trainsim.cluster.policies`); each job's iteration time for any GPU count and placement comes from
trainsim's predictor and search (:mod:`~trainsim.cluster.throughput`). The event loop is
:mod:`~trainsim.cluster.engine`; tables and metrics :mod:`~trainsim.cluster.outputs`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from trainsim.cluster.engine import Engine, SimulationResult
from trainsim.cluster.policies import POLICIES, Policy, get_policy
from trainsim.cluster.spec import ClusterSpec, load_cluster
from trainsim.cluster.throughput import OverheadModel, ThroughputModel
from trainsim.cluster.trace import JobSpec, job_specs, load_trace
from trainsim.errors import TrainsimError

__all__ = ["POLICIES", "ClusterSpec", "OverheadModel", "SimulationResult", "ThroughputModel", "check_fits",
           "load_cluster", "load_trace", "run", "simulate"]


def check_fits(specs: list[JobSpec], cluster: ClusterSpec, tm: ThroughputModel, policy: Policy) -> None:
    """Raise a one-line error for the first job that cannot run on any allowed pool."""
    names = {p.name for p in cluster.pools}
    for s in specs:
        where = f"trace row {s.index + 1} (job_id {s.job_id})"
        if s.pool is not None and s.pool not in names:
            raise TrainsimError(f"{where}, pool", f"unknown pool {s.pool!r}", f"use one of {', '.join(sorted(names))}")
        pools = [p for p in cluster.pools if s.pool is None or p.name == s.pool]
        ok = False
        for p in pools:
            if policy.elastic:
                extra = [x for x in (s.requested_gpus, s.min_gpus, s.max_gpus) if x]
                c = tm.curve(s, p, extra)
                lo, hi = s.min_gpus or 1, s.max_gpus or p.num_gpus
                mask = c.fits & (c.sizes >= lo) & (c.sizes <= hi)
                ok = bool(mask.any())
            else:
                ok = s.requested_gpus <= p.num_gpus and math.isfinite(tm.iteration_time(s, p, s.requested_gpus))
            if ok:
                break
        if not ok:
            what = (f"{s.requested_gpus} requested GPUs" if not policy.elastic
                    else "any allowed GPU count")
            raise TrainsimError(f"{where}, requested_gpus",
                                f"{s.model} fits on no pool with {what} ({tm.source} throughput)",
                                "request more GPUs (a count where a plan fits in memory), or add a larger pool")


def run(trace: str | Path | pd.DataFrame, cluster: str | Path | dict[str, Any] | ClusterSpec, *,
        policy: str | Policy = "fifo", throughput: str | ThroughputModel = "best", search_space: str = "tdp",
        framework: str | None = None, overhead: OverheadModel | None = None, seed: int = 0,
        until_s: float | None = None, progress: Callable[[int, int], None] | None = None) -> SimulationResult:
    """Validate the inputs and run the event loop; returns the raw :class:`SimulationResult`.

    ``framework`` is the software stack of jobs whose trace row names none (default: trainsim's, megatron-core).
    """
    df = load_trace(trace)
    spec = load_cluster(cluster)
    tm = (throughput if isinstance(throughput, ThroughputModel)
          else ThroughputModel.parse(throughput, search_space, framework))
    pol = get_policy(policy)
    specs = job_specs(df, lambda r: int(r.global_batch_size) * int(r.seq_length if r.seq_length is not pd.NA
                                                                    else tm.model(str(r.model)).seq_length))
    check_fits(specs, spec, tm, pol)
    from trainsim.cluster.predictor_adapter import flush_cache

    flush_cache()
    engine = Engine(specs, spec, pol, tm, overhead or OverheadModel(), seed=seed, until_s=until_s, progress=progress)
    try:
        return engine.run()
    finally:
        flush_cache()


def simulate(trace: str | Path | pd.DataFrame, cluster: str | Path | dict[str, Any] | ClusterSpec, *,
             policy: str | Policy = "fifo", throughput: str | ThroughputModel = "best", search_space: str = "tdp",
             framework: str | None = None, overhead: OverheadModel | None = None, seed: int = 0,
             until_s: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Simulate a trace on a cluster; return ``(jobs, allocations, metrics)`` (two DataFrames and a dict).

    ``framework``: software stack of the jobs whose trace row has no ``framework`` (e.g. ``megatron-lm-2021``).
    """
    from trainsim.cluster.outputs import allocations_frame, jobs_frame, metrics

    res = run(trace, cluster, policy=policy, throughput=throughput, search_space=search_space, framework=framework,
              overhead=overhead, seed=seed, until_s=until_s)
    alloc = allocations_frame(res)
    jobs = jobs_frame(res, alloc)
    return jobs, alloc, metrics(res, jobs, alloc)
