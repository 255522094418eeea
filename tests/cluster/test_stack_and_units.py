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
