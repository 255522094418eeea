"""The event loop: policy rules, invariants, accounting identities (exact), determinism."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_helpers import check_accounting
from trainsim.cluster import POLICIES, load_cluster, simulate
from trainsim.errors import TrainsimError

CLUSTER = load_cluster("dgx-a100:4")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_accounts_exactly(trace: pd.DataFrame, policy: str) -> None:
    jobs, alloc, m = simulate(trace, CLUSTER, policy=policy)
    check_accounting(trace, jobs, alloc, m, CLUSTER)
    assert m["n_finished"] + m["n_rejected"] == len(trace)


def test_fifo_starts_in_order_and_blocks(trace: pd.DataFrame) -> None:
    jobs, alloc, _ = simulate(trace, CLUSTER, policy="fifo")
    starts = jobs.set_index("job_id")["first_start_s"]
    assert list(starts.sort_values(kind="stable").index) == list(trace["job_id"])  # no overtaking
    assert (alloc.groupby("job_id").size() == 1).all()  # never preempted
    got = alloc.set_index("job_id")["gpus"].sort_index()
    assert (got == trace.set_index("job_id")["requested_gpus"].sort_index()).all()


def test_backfill_lets_small_jobs_through() -> None:
    tr = pd.DataFrame({"job_id": ["big0", "big1", "small"], "submit_time_s": [0.0, 1.0, 2.0],
                       "model": ["gpt3-1.7b"] * 3, "global_batch_size": [512] * 3, "iterations": [50, 50, 5],
                       "requested_gpus": [24, 16, 8]})
    fifo = simulate(tr, CLUSTER, policy="fifo")[0].set_index("job_id")
    back = simulate(tr, CLUSTER, policy="fifo-backfill")[0].set_index("job_id")
    assert fifo.loc["small", "first_start_s"] >= fifo.loc["big1", "first_start_s"]
    assert back.loc["small", "first_start_s"] == 2.0


def test_edf_runs_the_urgent_job_first() -> None:
    tr = pd.DataFrame({"job_id": ["late", "urgent"], "submit_time_s": [0.0, 10.0], "model": ["gpt3-1.7b"] * 2,
                       "global_batch_size": [512] * 2, "iterations": [200, 20], "requested_gpus": [32, 32],
                       "deadline_s": [1e6, 1000.0]})
    jobs, _alloc, _ = simulate(tr, CLUSTER, policy="edf")
    j = jobs.set_index("job_id")
    assert j.loc["urgent", "first_start_s"] == 10.0 and bool(j.loc["urgent", "met_deadline"])
    assert j.loc["late", "restarts"] == 1  # preempted once


def test_job_that_fits_nowhere_is_one_error(trace: pd.DataFrame) -> None:
    trace.loc[0, "requested_gpus"] = 64
    with pytest.raises(TrainsimError, match=r"row 1.*fits on no pool"):
        simulate(trace, CLUSTER, policy="fifo")
    big = trace.assign(model="gpt3-175b", requested_gpus=1)
    with pytest.raises(TrainsimError, match="fits on no pool"):
        simulate(big, CLUSTER, policy="elasticflow")


def test_deterministic_with_failures_and_stragglers(trace: pd.DataFrame) -> None:
    c = load_cluster({"pools": [{"name": "a", "system": "dgx-a100", "nodes": 4}],
                      "failures": {"node_mtbf_h": 0.3, "repair_h": 0.1, "restart_s": 20},
                      "stragglers": {"rate_per_node_day": 30, "slowdown": 2.0, "duration_h": 0.2}})
    a = simulate(trace, c, policy="elasticflow", seed=3)
    b = simulate(trace, c, policy="elasticflow", seed=3)
    pd.testing.assert_frame_equal(a[0], b[0])
    pd.testing.assert_frame_equal(a[1], b[1])
    assert a[2] == b[2]
    check_accounting(trace, a[0], a[1], a[2], c)
    assert a[2]["restarts"] > 0 and a[2]["lost_gpu_hours"] > 0
    # straggler segments: iteration time above the plan's for some segment
    other = simulate(trace, c, policy="elasticflow", seed=4)
    assert not a[1].equals(other[1])


def test_straggler_slowdown_comes_from_the_event_engine() -> None:
    from trainsim.cluster.spec import Pool
    from trainsim.cluster.throughput import ThroughputModel
    from trainsim.cluster.trace import JobSpec

    tm = ThroughputModel()
    job = JobSpec(0, "x", 0.0, "gpt3-1.7b", 512, None, 1, None, 8, None, None, 1.0, "t", None, None)
    pool = Pool(name="a", system="dgx-a100", nodes=2)
    p = tm.point(job, pool, 16)
    assert p is not None
    s = tm.slowdown(job, pool, p, 2.0)
    assert 1.0 < s <= 2.0 + 1e-9 and s != 2.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 10), seed=st.integers(0, 10_000), policy=st.sampled_from(sorted(POLICIES)),
       data=st.data())
def test_fuzzed_traces_account_exactly(n: int, seed: int, policy: str, data: st.DataObject) -> None:
    submit = sorted(data.draw(st.lists(st.floats(0, 5000, allow_nan=False), min_size=n, max_size=n)))
    iters = data.draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    gpus = data.draw(st.lists(st.sampled_from([1, 2, 4, 8, 16, 24, 32]), min_size=n, max_size=n))
    slack = data.draw(st.lists(st.one_of(st.none(), st.floats(10, 20000)), min_size=n, max_size=n))
    tr = pd.DataFrame({"job_id": [f"f{i}" for i in range(n)], "submit_time_s": submit,
                       "model": ["gpt3-1.7b"] * n, "global_batch_size": [256] * n, "iterations": iters,
                       "requested_gpus": gpus,
                       "deadline_s": [None if s is None else t + s for t, s in zip(submit, slack, strict=True)]})
    c = load_cluster({"pools": [{"name": "a", "system": "dgx-a100", "nodes": 4}], "topology": {"nodes_per_rack": 2},
                      "failures": {"node_mtbf_h": 2.0, "repair_h": 0.2, "restart_s": 10}})
    jobs, alloc, m = simulate(tr, c, policy=policy, seed=seed)
    check_accounting(tr, jobs, alloc, m, c)
