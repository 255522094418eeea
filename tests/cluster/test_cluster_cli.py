"""``trainsim cluster ...`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from cli_helpers import check_one_line_error, run


def _write(trace: pd.DataFrame, tmp_path: Path) -> Path:
    p = tmp_path / "trace.csv"
    trace.to_csv(p, index=False)
    return p


def test_run_writes_outputs_and_json(trace: pd.DataFrame, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = _write(trace, tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run(["cluster", "run", "--trace", str(p), "--cluster", "dgx-a100:4", "--policy", "edf",
                             "--out", str(out), "--json"], capsys)
    assert code == 0, err
    m = json.loads(stdout)
    assert m["n_jobs"] == len(trace) and m["policy"] == "edf"
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(m))
    jobs = pd.read_csv(out / "jobs.csv")
    alloc = pd.read_parquet(out / "allocations.parquet")
    assert list(jobs.columns)[:3] == ["job_id", "model", "tenant"] and len(alloc) >= len(trace)
    for png in ("gantt.png", "utilisation.png", "jct_cdf.png"):
        assert (out / png).stat().st_size > 1000


def test_run_is_byte_identical(trace: pd.DataFrame, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = _write(trace, tmp_path)
    outs = []
    for k in range(2):
        out = tmp_path / f"o{k}"
        code, _, err = run(["cluster", "run", "-t", str(p), "-c", "dgx-a100:4", "-p", "elasticflow", "--seed", "5",
                            "--failures", "node_mtbf_h=1", "--stragglers", "rate_per_node_day=20",
                            "--out", str(out), "--no-plots"], capsys)
        assert code == 0, err
        outs.append(out)
    for name in ("jobs.csv", "allocations.parquet", "metrics.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()


def test_bad_inputs_are_one_line_errors(trace: pd.DataFrame, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = trace.copy()
    bad.loc[2, "deadline_s"] = 1.0
    code, _, err = run(["cluster", "run", "-t", str(_write(bad, tmp_path)), "-c", "dgx-a100:4"], capsys)
    check_one_line_error(code, err, "row 3", "deadline_s")
    good = _write(trace, tmp_path)
    code, _, err = run(["cluster", "run", "-t", str(good), "-c", "dgx-a100:4", "--policy", "magic"], capsys)
    check_one_line_error(code, err, "--policy", "magic")
    code, _, err = run(["cluster", "run", "-t", str(good), "-c", "dgx-a100:4", "--out", str(tmp_path / "x" / "y")],
                       capsys)
    check_one_line_error(code, err, "--out", "does not exist")
    code, _, err = run(["cluster", "run", "-t", str(good), "-c", "dgx-a100:4", "--failures", "mtbf=1"], capsys)
    check_one_line_error(code, err, "--failures")


def test_curves_json_and_elasticflow(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(["cluster", "curves", "-m", "gpt3-1.7b", "-s", "dgx-a100", "--gbs", "512", "--gpus", "1:16",
                          "--json"], capsys)
    assert code == 0, err
    curve = json.loads(out)["curve"]
    assert [r["num_gpus"] for r in curve] == [1, 2, 4, 8, 16]
    assert set(curve[0]) >= {"num_gpus", "iteration_time_s", "plan", "fits"}
    times = [r["iteration_time_s"] for r in curve if r["fits"]]
    assert times == sorted(times, reverse=True)
    code, out, _ = run(["cluster", "curves", "-m", "gpt3-1.7b", "--gbs", "512", "--gpus", "8", "--format",
                        "elasticflow"], capsys)
    assert code == 0 and out.splitlines()[0] == "num_gpus,throughput"


def test_report_html(trace: pd.DataFrame, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = _write(trace, tmp_path)
    html = tmp_path / "report.html"
    code, _, err = run(["cluster", "run", "-t", str(p), "-c", "dgx-a100:4", "-p", "elasticflow", "--report",
                        str(html)], capsys)
    assert code == 0, err
    assert html.read_text().lstrip().lower().startswith("<!doctype html")
