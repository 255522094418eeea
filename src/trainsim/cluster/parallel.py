"""Precompute throughput curves on a process pool (``--workers``): results are identical to the serial ones (each
point is a pure function of its inputs), only faster to obtain; they fill the throughput model's memo."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from trainsim.cluster.spec import ClusterSpec
from trainsim.cluster.throughput import ThroughputModel, job_key, pow2_sizes
from trainsim.cluster.trace import JobSpec, job_specs, load_trace


def _points(args: tuple[ThroughputModel, JobSpec, Any, list[int]]) -> list[tuple[int, Any]]:
    tm, job, pool, sizes = args
    return [(n, tm.point(job, pool, n)) for n in sizes]


def precompute(trace: str | Path | pd.DataFrame, cluster: ClusterSpec, tm: ThroughputModel, workers: int) -> None:
    """Fill ``tm``'s memo with the compact-placement points of every job class on every pool."""
    specs = job_specs(load_trace(trace))
    classes: dict[Any, JobSpec] = {}
    for s in specs:
        classes.setdefault(job_key(s), s)
    tasks = []
    for s in classes.values():
        for pool in cluster.pools:
            sizes = sorted(set(pow2_sizes(pool.num_gpus)) | {s.requested_gpus})
            tasks.append((ThroughputModel(source=tm.source, space=tm.space, table_dir=tm.table_dir,
                                          framework=tm.framework), s, pool, sizes))
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for (_, s, pool, _), res in zip(tasks, ex.map(_points, tasks), strict=True):
            for n, p in res:
                gpn = min(pool.gpn, n) if n < pool.gpn else pool.gpn
                tm._points.setdefault((job_key(s), pool.name, n, gpn), p)
