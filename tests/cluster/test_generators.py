"""Trace generators, importers, the case study and determinism across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cli_helpers import check_one_line_error, run
from trainsim.cluster.casestudy import CASESTUDY_GPU_SCALE
from trainsim.cluster.generators import poisson, vtrain2
from trainsim.cluster.importers import import_trace
from trainsim.cluster.trace import validate_trace
from trainsim.errors import TrainsimError

REPO = Path(__file__).resolve().parents[2]


def test_vtrain2_recipe(itp_dir: Path) -> None:
    a = vtrain2(itp_dir / "cluster01.csv", 64, seed=7)
    b = vtrain2(itp_dir / "cluster01.csv", 64, seed=7)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(vtrain2(itp_dir / "cluster01.csv", 64, seed=8))
    df = validate_trace(a)
    assert len(df) == 64 and df["submit_time_s"].iloc[0] == 0.0
    assert set(df["model"]) <= {"gpt3-18.4b", "gpt3-39.1b", "gpt3-81.2b", "gpt3-76.1b"}
    slack = (df["deadline_s"] - df["submit_time_s"]).to_numpy()
    assert (slack > 0).all()
    at_once = vtrain2(itp_dir / "cluster01.csv", 32, seed=7, deadlines=False, all_at_once=True)
    assert at_once["submit_time_s"].eq(0).all() and at_once["deadline_s"].isna().all()


def test_vtrain2_gpu_scale_loads_the_cluster(itp_dir: Path) -> None:
    # more GPUs per ITP GPU: same jobs, arrivals and durations, larger requests (so more GPU-time to schedule)
    a = vtrain2(itp_dir / "cluster01.csv", 32, seed=7)
    b = vtrain2(itp_dir / "cluster01.csv", 32, seed=7, gpu_scale=32)
    assert (b["requested_gpus"] >= a["requested_gpus"]).all() and b["requested_gpus"].sum() > a["requested_gpus"].sum()
    pd.testing.assert_series_equal(a["submit_time_s"], b["submit_time_s"])
    with pytest.raises(TrainsimError, match="--gpu-scale"):
        vtrain2(itp_dir / "cluster01.csv", 8, seed=7, gpu_scale=0)


def test_poisson(itp_dir: Path) -> None:
    df = validate_trace(poisson(itp_dir / "cluster02.csv", 50, ["gpt3-1.7b", "gpt3-7.5b"], seed=1,
                                mean_interarrival_s=100.0, cluster="dgx-a100:16"))
    assert len(df) == 50 and df["submit_time_s"].is_monotonic_increasing
    assert 30 < df["submit_time_s"].diff().mean() < 300
    with pytest.raises(TrainsimError, match="--models"):
        poisson(itp_dir / "cluster02.csv", 5, [], seed=1)


def test_import_elasticflow_and_csv_formats(tmp_path: Path) -> None:
    ef = tmp_path / "ef.csv"
    ef.write_text("job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
                  "a,100,500,bert,4000,128,1,1183\nb,150,800,resnet50,9000,256,4,1215\n")
    df = validate_trace(import_trace(ef, "elasticflow", ["bert=gpt3-1.7b", "*=gpt3-3.6b"], cluster="dgx-a100:4"))
    assert list(df["model"]) == ["gpt3-1.7b", "gpt3-3.6b"] and list(df["iterations"]) == [500, 800]
    assert list(df["submit_time_s"]) == [0.0, 50.0] and df["deadline_s"].iloc[0] == 3900.0
    helios = tmp_path / "helios.csv"
    helios.write_text("job_id,user,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration\n"
                      "1,u1,8,8,1,COMPLETED,2020-04-01 00:00:00,x,y,3600\n"
                      "2,u2,0,8,1,COMPLETED,2020-04-01 00:10:00,x,y,60\n"
                      "3,u1,16,8,2,FAILED,2020-04-01 01:00:00,x,y,7200\n")
    df = validate_trace(import_trace(helios, "helios", cluster="dgx-a100:4"))
    assert list(df["job_id"]) == ["1", "3"] and list(df["submit_time_s"]) == [0.0, 3600.0]
    assert list(df["tenant"]) == ["u1", "u1"] and (df["iterations"] >= 1).all()
    philly = tmp_path / "philly.json"
    philly.write_text(json.dumps([{"jobid": "p1", "user": "x", "submitted_time": "2017-10-03 03:57:31",
                                   "attempts": [{"start_time": "2017-10-03 04:00:00",
                                                 "end_time": "2017-10-03 05:00:00",
                                                 "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}]))
    df = validate_trace(import_trace(philly, "philly", cluster="dgx-a100:4"))
    assert df["requested_gpus"].iloc[0] >= 2
    with pytest.raises(TrainsimError, match="acme columns"):
        import_trace(ef, "acme")


def test_trace_cli_and_casestudy(itp_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "t.csv"
    code, _, err = run(["cluster", "trace", "vtrain2", "--itp", str(itp_dir / "cluster01.csv"), "--jobs", "16",
                        "--seed", "3", "-o", str(out)], capsys)
    assert code == 0, err
    assert len(pd.read_csv(out)) == 16
    code, _, err = run(["cluster", "trace", "vtrain2", "--itp", str(tmp_path / "none.csv"), "--jobs", "16",
                        "-o", str(out)], capsys)
    check_one_line_error(code, err, "--itp", "does not exist")
    code, stdout, err = run(["cluster", "casestudy", "vtrain2", "--itp", str(itp_dir / "cluster01.csv"),
                             "--seed", "1", "--time-scale", "1", "--json"], capsys)
    assert code == 0, err
    result = json.loads(stdout)
    assert result["framework"] == "megatron-lm-2021" and result["time_scale"] == 1.0
    assert result["gpu_scale"] == CASESTUDY_GPU_SCALE == 32  # the CLI default is the case study's constant
    rows = result["rows"]
    assert [r["experiment"] for r in rows] == ["deadline-64", "deadline-128", "jct-32", "makespan-32"]
    for r in rows:
        assert r["best"] is not None and r["dp_only"] is not None and r["offered_load"] > 0


def test_identical_bytes_across_hash_seeds_and_workers(tmp_path: Path) -> None:
    from cluster_helpers import small_trace

    trace = tmp_path / "t.csv"
    small_trace(10).to_csv(trace, index=False)
    outs = []
    for k, (hashseed, workers) in enumerate([("0", "1"), ("123", "2")]):
        out = tmp_path / f"o{k}"
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(REPO / "src")}
        subprocess.run([sys.executable, "-m", "trainsim", "cluster", "run", "-t", str(trace), "-c", "dgx-a100:4",
                        "-p", "elasticflow", "--seed", "2", "--stragglers", "rate_per_node_day=50",
                        "--workers", workers, "--out", str(out), "--no-plots"], check=True, env=env,
                       capture_output=True)
        outs.append(out)
    for name in ("jobs.csv", "allocations.parquet", "metrics.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
