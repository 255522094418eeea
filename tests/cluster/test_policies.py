"""Rules of each policy on hand-made traces."""

from __future__ import annotations

import pandas as pd
import pytest

from trainsim.cluster import load_cluster, simulate
from trainsim.cluster.policies import POLICIES, get_policy
from trainsim.errors import TrainsimError

CLUSTER = load_cluster("dgx-a100:4")


def _trace(**cols: list) -> pd.DataFrame:  # type: ignore[type-arg]
    n = len(cols["iterations"])
    base = {"job_id": [f"j{i}" for i in range(n)], "submit_time_s": [float(i) for i in range(n)],
            "model": ["gpt3-1.7b"] * n, "global_batch_size": [512] * n, "requested_gpus": [32] * n}
    base.update(cols)
    return pd.DataFrame(base)


def test_registry_has_every_policy_of_the_issue() -> None:
    assert {"fifo", "fifo-backfill", "sjf", "srtf", "las", "edf", "elasticflow", "gavel-maxmin", "sia", "themis",
            "deadline-plan"} <= set(POLICIES)
    with pytest.raises(TrainsimError, match="unknown policy"):
        get_policy("lottery")


def test_sjf_runs_the_short_job_next() -> None:
    tr = _trace(iterations=[50, 200, 10])
    j = simulate(tr, CLUSTER, policy="sjf")[0].set_index("job_id")
    assert j.loc["j2", "first_start_s"] < j.loc["j1", "first_start_s"]
    assert (j["restarts"] == 0).all()


def test_srtf_preempts_for_a_shorter_job() -> None:
    tr = _trace(iterations=[300, 5])
    j = simulate(tr, CLUSTER, policy="srtf")[0].set_index("job_id")
    assert j.loc["j1", "first_start_s"] == 1.0 and j.loc["j0", "restarts"] == 1


def test_las_prefers_least_attained_service() -> None:
    # j0 crosses the first queue threshold (tiny here) and yields to the newcomer
    from trainsim.cluster.policies.las import Las

    tr = _trace(iterations=[20000, 20], submit_time_s=[0.0, 2000.0])
    j = simulate(tr, CLUSTER, policy=Las(thresholds_gpu_h=(1.0,), tick_s=100.0))[0].set_index("job_id")
    assert j.loc["j1", "first_start_s"] == 2000.0 and j.loc["j0", "restarts"] >= 1


def test_themis_preempts_only_at_lease_ends() -> None:
    from trainsim.cluster.policies.themis import Themis

    tr = _trace(iterations=[20000, 20], submit_time_s=[0.0, 100.0])
    j = simulate(tr, CLUSTER, policy=Themis(lease_s=1000.0))[0].set_index("job_id")
    assert j.loc["j1", "first_start_s"] >= 1000.0


def test_gavel_shares_time_between_pools_by_throughput() -> None:
    c = load_cluster({"pools": [{"name": "a100", "system": "dgx-a100", "nodes": 1},
                                {"name": "h100", "system": "dgx-h100", "nodes": 1}]})
    tr = _trace(iterations=[60, 60], requested_gpus=[8, 8])
    _, alloc, _ = simulate(tr, c, policy="gavel-maxmin")
    assert set(alloc["pool"]) == {"a100", "h100"}  # both pools used at once


def test_sia_and_elastic_policies_use_several_sizes() -> None:
    tr = _trace(iterations=[3000, 3000, 3000], submit_time_s=[0.0, 500.0, 1000.0], requested_gpus=[8, 8, 8])
    for policy in ("sia", "elasticflow", "deadline-plan"):
        _, alloc, _ = simulate(tr, CLUSTER, policy=policy)
        assert alloc["gpus"].nunique() > 1, policy
        assert alloc.groupby("t0_s")["gpus"].sum().max() <= 32


def test_elasticflow_rejects_an_impossible_deadline_and_meets_the_others() -> None:
    tr = _trace(iterations=[100, 100000, 50], deadline_s=[5000.0, 1000.0, 8000.0], requested_gpus=[8, 8, 8])
    j, _, m = simulate(tr, CLUSTER, policy="elasticflow")
    j = j.set_index("job_id")
    assert not j.loc["j1", "admitted"] and j.loc["j1", "reject_reason"] == "deadline cannot be met"
    assert j.loc[["j0", "j2"], "met_deadline"].all() and m["n_rejected"] == 1


def test_deadline_plan_picks_the_cheaper_pool() -> None:
    c = load_cluster({"pools": [{"name": "fast", "system": "dgx-h100", "nodes": 2, "price_per_gpu_hour": 50.0},
                                {"name": "cheap", "system": "dgx-a100", "nodes": 2, "price_per_gpu_hour": 1.0}]})
    tr = _trace(iterations=[50], deadline_s=[1e6], requested_gpus=[8])
    _, alloc, _ = simulate(tr, c, policy="deadline-plan")
    assert alloc["pool"].iloc[0] == "cheap"
