"""The software stack of cluster jobs, ElasticFlow's DP-only unit and power-of-two sizes, and the time scale of the
vTrain recipe."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cli_helpers import check_one_line_error, run
from cluster_helpers import check_accounting
from trainsim.cluster import load_cluster, simulate
from trainsim.cluster.generators import offered_load, vtrain2
from trainsim.cluster.spec import Pool
from trainsim.cluster.throughput import ThroughputModel
from trainsim.cluster.trace import JobSpec, job_specs, load_trace

POOL = Pool(name="a100", system="dgx-a100", nodes=16)


def _job(model: str, gbs: int, framework: str | None = None) -> JobSpec:
    return JobSpec(0, "x", 0.0, model, gbs, 2048, 1, None, 8, None, None, 1.0, "t", None, None, framework)


def test_framework_changes_iteration_time_and_row_overrides_default() -> None:
    core = ThroughputModel(source="best")
    old = ThroughputModel(source="best", framework="megatron-lm-2021")
    t_core = core.iteration_time(_job("gpt3-18.4b", 1024), POOL, 64)
    t_old = old.iteration_time(_job("gpt3-18.4b", 1024), POOL, 64)
    assert t_old > t_core  # no overlapped gradient reduce, no gradient-accumulation fusion, older kernels
    # a row's framework wins over the model's default
    assert core.iteration_time(_job("gpt3-18.4b", 1024, "megatron-lm-2021"), POOL, 64) == t_old


def test_dp_only_unit_is_smallest_power_of_two_tensor_first() -> None:
    tm = ThroughputModel(source="dp-only", framework="megatron-lm-2021")
    for model, gbs in (("gpt3-18.4b", 1024), ("gpt3-39.1b", 1536), ("gpt3-81.2b", 1792)):
        job = _job(model, gbs)
        tp, pp = tm._dp_only_base(job, POOL)  # type: ignore[misc]
        unit = tp * pp
        assert unit & (unit - 1) == 0 and pp & (pp - 1) == 0 and tp <= 8
        # nothing smaller fits: the unit is the model's minimum power-of-two footprint (DP-only needs it)
        c = tm.curve(job, POOL)
        assert c.min_size == unit
        # tensor inside the node first: no equal product with a larger tensor degree exists
        assert tp == 8 or unit < 8
        # DP-only is never faster than the best plan at the same GPU count
        best = ThroughputModel(source="best", framework="megatron-lm-2021")
        for n in (unit, 2 * unit, 4 * unit):
            assert best.iteration_time(job, POOL, n) <= tm.iteration_time(job, POOL, n)


def test_elasticflow_allocates_powers_of_two(itp_dir: Path) -> None:
    trace = vtrain2(itp_dir / "cluster01.csv", 16, seed=3, cluster="dgx-a100:32", time_scale=2.0)
    spec = load_cluster("dgx-a100:32")
    for src in ("best", "dp-only"):
        jobs, alloc, m = simulate(trace, spec, policy="elasticflow", throughput=src, seed=0)
        gpus = alloc["gpus"].to_numpy()
        assert ((gpus & (gpus - 1)) == 0).all()
        check_accounting(trace, jobs, alloc, m, spec)


def test_vtrain2_framework_column_and_time_scale(itp_dir: Path) -> None:
    a = vtrain2(itp_dir / "cluster01.csv", 32, seed=5)
    assert (a["framework"] == "megatron-lm-2021").all()
    b = vtrain2(itp_dir / "cluster01.csv", 32, seed=5, time_scale=10.0)
    # the same jobs, ten times longer and ten times further apart
    assert list(a["model"]) == list(b["model"]) and list(a["requested_gpus"]) == list(b["requested_gpus"])
    pd.testing.assert_series_equal(b["submit_time_s"], a["submit_time_s"] * 10.0, check_exact=False, rtol=1e-12)
    ratio = b["iterations"].sum() / a["iterations"].sum()
    assert 9.0 < ratio < 11.0
    spec = load_cluster("dgx-a100:128")
    tm = ThroughputModel(source="dp-only")
    assert offered_load(b, tm, spec) == pytest.approx(offered_load(a, tm, spec), rel=0.1)
    none = vtrain2(itp_dir / "cluster01.csv", 4, seed=5, framework=None)
    assert "framework" not in none.columns
    with pytest.raises(Exception, match="--time-scale"):
        vtrain2(itp_dir / "cluster01.csv", 4, seed=5, time_scale=0.0)


def test_trace_framework_column_validated(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "t.csv"
    p.write_text("job_id,submit_time_s,model,global_batch_size,iterations,requested_gpus,framework\n"
                 "a,0,gpt3-1.7b,64,2,8,megatron-lm-2021\nb,1,gpt3-1.7b,64,2,8,megatron-2099\n")
    code, _, err = run(["cluster", "run", "-t", str(p), "-c", "dgx-a100:2"], capsys)
    check_one_line_error(code, err, "row 2", "framework", "megatron-2099")
    p.write_text("job_id,submit_time_s,model,global_batch_size,iterations,requested_gpus,framework\n"
                 "a,0,gpt3-1.7b,64,2,8,megatron-lm-2021\nb,1,gpt3-1.7b,64,2,8,\n")
    specs = job_specs(load_trace(p))
    assert [s.framework for s in specs] == ["megatron-lm-2021", None]
    code, _, err = run(["cluster", "run", "-t", str(p), "-c", "dgx-a100:2", "--framework", "nope"], capsys)
    check_one_line_error(code, err, "--framework")
    code, out, _ = run(["cluster", "curves", "-m", "gpt3-1.7b", "--gbs", "64", "--gpus", "8",
                        "--framework", "megatron-lm-2021", "--json"], capsys)
    assert code == 0 and '"curve"' in out


def _sizes(pairs: list[tuple[int, float]]):  # type: ignore[no-untyped-def]
    from trainsim.cluster.policies.elastic_common import Sizes

    s = Sizes.__new__(Sizes)
    s._size_list = [n for n, _ in pairs]
    s._time_list = [t for _, t in pairs]
    s._neg_times = [-t for _, t in pairs]
    return s


def test_timeline_plan_fills_backwards_from_the_deadline() -> None:
    from trainsim.cluster.policies.elastic_common import Timeline

    tl = Timeline(0.0, 8, [(100.0, 8)])  # all 8 GPUs reserved until t = 100
    sizes = _sizes([(4, 2.0), (8, 1.0)])
    # the smallest quota first: 4 GPUs (2 s per iteration) give exactly 50 iterations between 100 and 200
    assert tl.plan(sizes, 50.0, 200.0) == [(100.0, 200.0, 4)]
    # 60 need the 8-GPU quota, booked as late as possible
    assert tl.plan(sizes, 60.0, 200.0) == [(140.0, 200.0, 8)]
    # nothing meets a deadline at 120 (only 20 s free)
    assert tl.plan(sizes, 50.0, 120.0) is None
    tl.reserve([(120.0, 200.0, 4)])  # now 8 GPUs free in [100, 120), 4 after
    # quota 8: 4 GPUs in [120, 200) give 40, 8 GPUs from 105 to 120 the other 15
    assert tl.plan(sizes, 55.0, 200.0) == [(105.0, 120.0, 8), (120.0, 200.0, 4)]
    assert tl.plan(sizes, 61.0, 200.0) is None


def test_elasticflow_timeline_admission_admits_what_the_instant_check_rejects() -> None:
    from trainsim.cluster.policies.elasticflow import ElasticFlow

    spec = load_cluster("dgx-a100:1")
    tm = ThroughputModel(source="best")
    job = JobSpec(0, "x", 0.0, "gpt3-1.7b", 512, None, 1, None, 8, None, None, 1.0, "t", None, None)
    t8 = tm.iteration_time(job, spec.pools[0], 8)
    t_a = 200 * t8
    # A needs all 8 GPUs to make its deadline; B fits after A, but not next to it
    trace = pd.DataFrame({"job_id": ["a", "b"], "submit_time_s": [0.0, 1.0], "model": ["gpt3-1.7b"] * 2,
                          "global_batch_size": [512, 512], "iterations": [200, 100], "requested_gpus": [8, 8],
                          "deadline_s": [1.02 * t_a, 1.0 + 1.02 * t_a + 1.5 * 100 * t8]})
    jobs, alloc, m = simulate(trace, spec, policy=ElasticFlow(), throughput=tm)
    j = jobs.set_index("job_id")
    assert j["admitted"].all() and j["met_deadline"].all()
    check_accounting(trace, jobs, alloc, m, spec)
    jobs, _, _ = simulate(trace, spec, policy=ElasticFlow(admission="instant"), throughput=tm)
    j = jobs.set_index("job_id")
    assert bool(j.loc["a", "met_deadline"]) and not bool(j.loc["b", "admitted"])
    with pytest.raises(Exception, match="admission"):
        ElasticFlow(admission="later")


def test_leftovers_go_to_the_smallest_marginal_gpu_time() -> None:
    from types import SimpleNamespace

    from trainsim.cluster.policies.elastic_common import hand_out

    linear = _sizes([(8, 8.0), (16, 4.0)])  # perfect scaling: growing costs no GPU-time
    poor = _sizes([(8, 8.0), (16, 6.0)])  # 16 GPUs only 1.33x faster
    # gpus=0: jobs not running yet (no restart to weigh; see test_restart_aware_shares for running jobs)
    jobs = [SimpleNamespace(spec=SimpleNamespace(index=0), remaining=10.0, gpus=0),
            SimpleNamespace(spec=SimpleNamespace(index=1), remaining=10.0, gpus=0)]
    alloc = {0: 8, 1: 8}
    left = hand_out(None, "p", 8, alloc, {0: poor, 1: linear}, jobs)  # type: ignore[arg-type]
    assert left == 0 and alloc == {0: 8, 1: 16}
    # with equal scaling, the job with less work left grows first
    jobs[0].remaining, jobs[1].remaining = 2.0, 10.0
    alloc = {0: 8, 1: 8}
    hand_out(None, "p", 8, alloc, {0: poor, 1: poor}, jobs)  # type: ignore[arg-type]
    assert alloc == {0: 16, 1: 8}
    # starting a waiting job comes first
    alloc = {0: 8}
    hand_out(None, "p", 8, alloc, {0: linear, 1: poor}, jobs)  # type: ignore[arg-type]
    assert alloc == {0: 8, 1: 8}


def test_vtrain2_sized_per_search_space_keeps_the_load(itp_dir: Path) -> None:
    spec = load_cluster("dgx-a100:128")
    tdp = vtrain2(itp_dir / "cluster02.csv", 12, seed=4, time_scale=10.0)
    full = vtrain2(itp_dir / "cluster02.csv", 12, seed=4, time_scale=10.0, search_space="full")
    # the same jobs and arrivals; iterations (and deadlines) from each space's DP-only speed
    assert list(tdp["model"]) == list(full["model"]) and list(tdp["submit_time_s"]) == list(full["submit_time_s"])
    assert (full["iterations"] > tdp["iterations"]).any()
    load_tdp = offered_load(tdp, ThroughputModel(source="dp-only", space="tdp"), spec)
    load_full = offered_load(full, ThroughputModel(source="dp-only", space="full"), spec)
    assert load_full == pytest.approx(load_tdp, rel=0.05)
