"""Helpers of the cluster tests: small traces, and the accounting identities of a result (zero tolerance)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from trainsim.cluster.spec import ClusterSpec


def check_accounting(trace: pd.DataFrame, jobs: pd.DataFrame, alloc: pd.DataFrame, m: dict[str, Any],
                     cluster: ClusterSpec) -> None:
    """Every identity between the trace, jobs.csv, allocations and metrics (exact)."""
    tr = trace.set_index("job_id")
    assert len(jobs) == len(trace) and set(jobs["job_id"]) == set(trace["job_id"])
    by_job = {k: g for k, g in alloc.groupby("job_id", sort=False)}
    price = {p.name: p.price for p in cluster.pools}
    for r in jobs.itertuples(index=False):
        g = by_job.get(r.job_id)
        iters = int(tr.loc[r.job_id, "iterations"])
        if not math.isnan(r.end_s):
            assert g is not None and int(g["iterations"].sum()) == iters  # work conserved, whole iterations
            assert r.end_s == g["t1_s"].max()
            assert r.jct_s == r.end_s - r.submit_time_s
        elif g is not None:
            assert int(g["iterations"].sum()) < iters
        if g is None:
            assert r.gpu_hours == 0 and (r.first_start_s is None or math.isnan(r.first_start_s))
            continue
        rows = list(g.itertuples(index=False))
        assert r.first_start_s == min(x.t0_s for x in rows)
        assert r.queue_s == r.first_start_s - r.submit_time_s
        assert r.first_start_s >= r.submit_time_s
        assert r.gpu_hours == math.fsum(x.gpus * (x.t1_s - x.t0_s) for x in rows) / 3600.0
        assert r.cost_usd == math.fsum(x.gpus * (x.t1_s - x.t0_s) / 3600.0 * price[x.pool] for x in rows)
        useful = math.fsum(x.gpus * x.useful_s for x in rows)
        assert r.lost_gpu_hours == (math.fsum(x.gpus * (x.t1_s - x.t0_s) for x in rows) - useful) / 3600.0
        assert r.lost_gpu_hours >= 0
        # one allocation at a time per job
        spans = sorted((x.t0_s, x.t1_s) for x in rows)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        for x in rows:
            assert x.t1_s > x.t0_s and x.gpus > 0 and 0 <= x.useful_s <= x.t1_s - x.t0_s
            nodes = [tuple(int(v) for v in part[1:].split(":")) for part in x.nodes.split(";")]
            assert sum(v for _, v in nodes) == x.gpus
            if x.tp:
                assert x.tp * x.pp * x.dp == x.gpus
        dl = tr.loc[r.job_id, "deadline_s"]
        if isinstance(dl, float) and not math.isnan(dl):
            assert bool(r.met_deadline) == (not math.isnan(r.end_s) and r.end_s <= dl)
    # no node over-allocated at any instant (sweep over segment boundaries)
    gpn = {p.name: p.gpn for p in cluster.pools}
    events: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    for x in alloc.itertuples(index=False):
        for part in x.nodes.split(";"):
            k, v = (int(s) for s in part[1:].split(":"))
            events[(x.pool, k)] += [(x.t0_s, v), (x.t1_s, -v)]
    for (pool, _), ev in events.items():
        ev.sort(key=lambda e: (e[0], e[1]))
        held = np.cumsum([v for _, v in ev])
        assert held.max() <= gpn[pool] and held.min() >= 0
    # metrics
    done = jobs["end_s"].notna()
    assert m["n_finished"] == int(done.sum()) and m["n_censored"] == int((~done).sum())
    with_dl = jobs["deadline_s"].notna()
    assert m["n_with_deadline"] == int(with_dl.sum())
    assert m["n_met"] == int(jobs.loc[with_dl, "met_deadline"].fillna(False).astype(bool).sum())
    if m["n_with_deadline"]:
        assert m["dsr"] == m["n_met"] / m["n_with_deadline"]
    assert m["n_rejected"] == int((~jobs["admitted"]).sum())
    if done.any():
        assert m["jct_mean_s"] == float(jobs.loc[done, "jct_s"].to_numpy().mean())
        assert m["makespan_s"] == float(jobs["end_s"].max()) - float(jobs["submit_time_s"].min())
    assert m["gpu_hours"] == math.fsum((alloc["gpus"] * (alloc["t1_s"] - alloc["t0_s"])).tolist()) / 3600.0
    assert 0 <= m["gpu_util"] <= 1 and 0 <= m["goodput_util"] <= m["gpu_util"]
    assert m["restarts"] == int(jobs["restarts"].sum())


def small_trace(n: int = 8, deadlines: bool = True) -> pd.DataFrame:
    """``n`` small GPT jobs arriving every 50 s."""
    models = ["gpt3-1.7b", "gpt3-3.6b"]
    return pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)],
        "submit_time_s": [50.0 * i for i in range(n)],
        "model": [models[i % 2] for i in range(n)],
        "global_batch_size": [512] * n,
        "iterations": [40 + 15 * (i % 5) for i in range(n)],
        "requested_gpus": [[8, 16, 4, 8, 32][i % 5] for i in range(n)],
        "deadline_s": [50.0 * i + 1500.0 + 400 * (i % 3) if deadlines else None for i in range(n)],
    })
