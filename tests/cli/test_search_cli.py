import json
import sys

import pandas as pd
import pytest

from cli_helpers import run
from trainsim.cli.search_options import space_from_options, typed_value
from trainsim.search import CANDIDATE_KEYS
from trainsim.search.space import OPEN

MTNLG = ["search", "-m", "mt-nlg-530b", "-s", "dgx-a100", "--tp", "4,8,16", "--dp",
         "1,2,3,4,5,6,8,10,12,15,16,20,24,30", "--pp", "3,5,7,15,21,35,105", "--gbs", "1920", "--seq-length", "2048",
         "--recompute-granularity", "full", "--train-tokens", "270e9", "--others", "default"]




def test_mtnlg_grid_json(capsys):
    code, out, err = run([*MTNLG, "--objective", "cost", "--top", "5", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert set(d) >= {"candidates", "pareto", "skipped"} and d["skipped"] == {}
    assert d["summary"]["valid"] == 294 and d["summary"]["objective"] == "cost"
    assert len(d["candidates"]) == 5
    for c in d["candidates"]:
        assert set(CANDIDATE_KEYS) <= set(c) and c["fits"]
    costs = [c["cost_usd"] for c in d["candidates"]]
    assert costs == sorted(costs)
    assert "tp = 16 spans nodes" in err and "98 candidates" in err  # warned once, with the count


def test_readable_output_explains_the_best(capsys):
    code, out, _ = run([*MTNLG, "--objective", "cost", "--top", "3"], capsys)
    assert code == 0
    assert "valid plans" in out and "best 3 of" in out and "best: tp" in out and "compute" in out
    assert "Pareto front" in out


def test_files_and_plot(tmp_path, capsys):
    csv, pq, png = tmp_path / "s.csv", tmp_path / "s", tmp_path / "s.png"
    code, out, err = run([*MTNLG, "--csv", str(csv), "--parquet", str(pq), "--plot", str(png), "--json"], capsys)
    assert code == 0, err
    json.loads(out)  # stdout stays pure JSON
    assert len(pd.read_csv(csv)) == 294 and len(pd.read_parquet(tmp_path / "s.parquet")) == 294
    assert png.read_bytes()[:4] == b"\x89PNG" and "wrote" in err


def test_defaults_left_unset_are_searched(capsys):
    # --mbs has a default of 1 in predict; in search a flag that is not given stays open
    code, out, err = run(["search", "-m", "gpt3-1.7b", "-s", "dgx-a100", "-n", "8", "--gbs", "16", "--tp", "2",
                          "--pp", "1", "--recompute-granularity", "full", "--zero-stage", "0", "--sp", "true",
                          "--top", "0", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["summary"]["space"]["micro_batch_size"] == OPEN
    assert sorted({c["micro_batch_size"] for c in d["candidates"]}) == [1, 2, 4, 8]  # gbs 16 over dp 4 or 2
    code, out, _ = run(["search", "-m", "gpt3-1.7b", "-s", "dgx-a100", "-n", "8", "--gbs", "16", "--tp", "2",
                        "--others", "default", "--top", "0", "--json"], capsys)
    d = json.loads(out)
    assert [(c["micro_batch_size"], c["pp"], c["recompute"]) for c in d["candidates"]] == [(1, 1, "none")]


def test_gpu_range_and_deadline(capsys):
    code, out, err = run(["search", "-m", "gpt3-18.4b", "-s", "dgx-a100", "-n", "64..512", "--tp", "8",
                          "--pp", "1,2,4", "--gbs", "512", "--recompute-granularity", "full", "--others", "default",
                          "--train-tokens", "100e9", "--objective", "gpus", "--deadline-days", "40", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["candidates"] and all(c["training_days"] <= 40 for c in d["candidates"])
    gpus = [c["num_gpus"] for c in d["candidates"]]
    assert gpus == sorted(gpus) and d["summary"]["space"]["num_gpus"] == [64, 128, 256, 512]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gbs", "1920,3840"], "--global-batch-size takes one value"),
        (["--tp", "4:2"], "backward"),
        (["--objective", "speed"], "unknown objective"),
        (["--objective", "cost"], "--train-tokens"),
        (["--backend", "slurm"], "unknown backend"),
        (["--workers", "0"], "at least 1"),
        (["--top", "-1"], "0 or more"),
        (["--others", "some"], "open or default"),
        (["--sp", "true", "--sequence-parallel", "--sp", "false"], "contradicts"),
        (["--zero-stage", "0,1", "--use-distributed-optimizer"], "lists 0"),
        (["--plot", "x.png", "--plot-x", "latency"], "unknown axis"),
    ],
)
def test_user_errors_exit_2_in_one_line(args, words, capsys):
    base = ["search", "-m", "gpt3-1.7b", "-s", "dgx-a100", "-n", "8", "--gbs", "16", "--tp", "1,2", "--others",
            "default"]
    code, out, err = run([*base, *args], capsys)
    assert code == 2 and out == ""
    assert err.startswith("error:") and words in err and err.count("\n") == 1


def test_ray_backend_without_ray(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)
    code, _, err = run(["search", "-m", "gpt3-1.7b", "-n", "8", "--gbs", "16", "--tp", "1,2", "--others", "default",
                        "--backend", "ray"], capsys)
    assert code == 2 and "pip install 'trainsim[ray]'" in err


def test_refine_without_the_event_engine(monkeypatch, capsys):
    from trainsim.search import refine

    monkeypatch.setattr(refine, "event_engine_problem", lambda: "trainsim.engine is not installed")
    code, _, err = run(["search", "-m", "gpt3-1.7b", "-n", "8", "--gbs", "16", "--tp", "1,2", "--others", "default",
                        "--refine", "2"], capsys)
    assert code == 2 and "event engine" in err


def test_space_from_options_keeps_predict_semantics():
    values = {"model": "gpt3-175b", "system": "dgx-a100", "num_gpus": "512:1024:512", "tp": "8", "pp": "all",
              "global_batch_size": "1536", "train_tokens": "300e9", "use_distributed_optimizer": True,
              "tp_comm_overlap": True, "sequence_parallel": True, "fp16": True, "gpus_per_node": "4",
              "price_per_gpu_hour": "1.5"}
    space = space_from_options(values)
    assert space.num_gpus == (512, 1024) and space.tp == (8,) and space.pp == OPEN
    assert space.zero_stage == (1,) and space.sequence_parallel == (True,)
    assert space.training.tp_comm_overlap and space.training.precision == "fp16"
    assert space.training.train_tokens == 300e9 and space.system.gpus_per_node == 4
    assert space.system.price_per_gpu_hour == 1.5
    assert typed_value("train_tokens", "3e11") == 3e11 and typed_value("seq_length", "4096") == 4096


def test_search_help_lists_the_new_options(capsys):
    code, out, _ = run(["search", "--help"], capsys)
    assert code == 0
    for flag in ("--objective", "--deadline-days", "--top", "--all", "--backend", "--workers", "--refine", "--csv",
                 "--parquet", "--plot", "--tensor-model-parallel-size", "--others"):
        assert flag in out
