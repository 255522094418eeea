"""``trainsim whatif`` end to end: JSON keys, files, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from trainsim.io.traces import write_op_trace
from trainsim.whatif import JSON_KEYS
from trainsim.whatif.synthetic import synthetic_trace

ISSUE_KEYS = {
    "step_time_actual_s",
    "step_time_simulated_s",
    "step_time_ideal_s",
    "slowdown",
    "discrepancy",
    "slowdown_by_optype",
    "slowdown_by_stage",
    "slowdown_by_dp_rank",
    "slowdown_by_step",
    "last_stage_share",
    "worker_share",
    "worker_share_cells",
    "fwd_bwd_correlation",
    "wasted_gpu_fraction",
    "verdict",
}


@pytest.fixture
def job(tmp_path: Path) -> Path:
    df, meta = synthetic_trace(
        pp=3,
        dp=2,
        microbatches=4,
        steps=[10, 11, 12],
        slow_stages={2: 1.5},
        sequence_jitter=0.02,
        seed=2,
        trial_name="J",
    )
    trace = tmp_path / "trace-J.parquet"
    write_op_trace(df, meta, trace, tmp_path / "meta-J.yaml")
    return trace


def test_json_output(run_cli, job: Path):
    code, out, err = run_cli("whatif", job, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert list(d) == list(JSON_KEYS)
    assert set(d) >= ISSUE_KEYS
    assert set(d["slowdown_by_stage"]) == {"0", "1", "2"}
    assert set(d["slowdown_by_dp_rank"]) == {"0", "1"}
    assert set(d["slowdown_by_step"]) == {"10", "11", "12"}
    assert d["verdict"] == "last-stage"
    assert d["worker_share_cells"] and all(len(c) == 2 for c in d["worker_share_cells"])
    assert d["slowdown"] > 1.0 and d["wasted_gpu_fraction"] == pytest.approx(1 - 1 / d["slowdown"])
    assert d["job"]["trial_name"] == "J"


def test_files(run_cli, job: Path, tmp_path: Path):
    out_dir = tmp_path / "out"
    heat, tl, itl = tmp_path / "h.png", tmp_path / "actual.json.gz", tmp_path / "ideal.json"
    code, out, err = run_cli(
        "whatif",
        job,
        "--meta",
        job.with_name("meta-J.yaml"),
        "--out",
        out_dir,
        "--heatmap",
        heat,
        "--timeline",
        tl,
        "--ideal-timeline",
        itl,
        "--timeline-steps",
        "11-12",
    )
    assert code == 0, err
    assert "verdict: last-stage" in out
    for name in (
        "result.json",
        "per_step.csv",
        "per_stage.csv",
        "per_dp_rank.csv",
        "per_rank.csv",
        "heatmap.png",
    ):
        assert (out_dir / name).is_file()
    assert heat.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with gzip.open(tl, "rt") as fh:
        actual = json.load(fh)
    ideal = json.loads(itl.read_text())
    for doc in (actual, ideal):
        slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert {e["args"]["step"] for e in slices} == {11, 12}
        assert len({e["pid"] for e in slices}) == 6  # one process per traced GPU
        names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
        assert {"compute", "forward-send", "backward-recv", "dp-comm", "grad-sync"} <= names
    assert json.loads((out_dir / "result.json").read_text())["verdict"] == "last-stage"


def test_options(run_cli, job: Path):
    code, out, _ = run_cli("whatif", job, "--json", "--ideal-group", "optype-stage", "--steps", "10,12")
    d = json.loads(out)
    assert code == 0 and d["steps"] == [10, 12]
    assert d["slowdown"] < 1.05  # per-stage idealization accepts the unbalanced stage
    assert d["idealization"]["group_by"] == "optype-stage"


def test_errors_are_one_line_with_exit_code_2(run_cli, job: Path, tmp_path: Path):
    cases = [
        ("whatif", tmp_path / "nope.parquet"),
        ("whatif", job, "--ideal-group", "rank"),
        ("whatif", job, "--steps", "99"),
        ("whatif", job, "--meta", tmp_path / "missing.yaml"),
    ]
    for args in cases:
        code, _, err = run_cli(*args)
        assert code == 2, args
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert "Traceback" not in err
    lonely = tmp_path / "lonely" / "trace-X.parquet"
    lonely.parent.mkdir()
    lonely.write_bytes(job.read_bytes())
    code, _, err = run_cli("whatif", lonely)
    assert code == 2 and "meta-X.yaml not found" in err
    corrupt = tmp_path / "trace-J2.parquet"
    corrupt.write_bytes(b"not parquet at all")
    (tmp_path / "meta-J2.yaml").write_text("trial_name: J2\ndp_size: 2\npp_size: 3\n")
    code, _, err = run_cli("whatif", corrupt)
    assert code == 2 and "cannot read parquet" in err


def test_real_trace_summary(run_cli, traces: Path):
    code, out, err = run_cli("whatif", traces / "trace-ST.parquet")
    assert code == 0, err
    assert "verdict: last-stage" in out


def test_top_level_lazy_export():
    import trainsim
    import trainsim.whatif

    assert trainsim.analyze_trace is trainsim.whatif.analyze_trace
