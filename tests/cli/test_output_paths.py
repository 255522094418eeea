"""Every output path of every command is checked before computing; writes are atomic (issue 15, item 3)."""

from __future__ import annotations

import importlib

import pytest

from cli_helpers import check_one_line_error, run

PREDICT = ["predict", "-m", "llama3-8b", "-n", "8", "--gbs", "64", "--seq-length", "2048"]
EVENT = [*PREDICT, "--engine", "event"]
SEARCH = ["search", "-m", "gpt3-1.7b", "-n", "8", "--gbs", "32", "--seq-length", "2048", "--no-progress"]

# (command line before the path, flag, what the path must be: file or dir)
CASES = [
    (EVENT, "--trace", "file"),
    (EVENT, "--memory-timeline", "file"),
    (EVENT, "--export-ops", "file"),
    ([*EVENT, "--export-ops", "{ok}/ops.parquet"], "--export-meta", "file"),
    (SEARCH, "--csv", "file"),
    (SEARCH, "--parquet", "file"),
    (SEARCH, "--plot", "file"),
    (["whatif", "{ok}/trace-1.parquet"], "--heatmap", "file"),
    (["whatif", "{ok}/trace-1.parquet"], "--timeline", "file"),
    (["whatif", "{ok}/trace-1.parquet"], "--ideal-timeline", "file"),
    (["whatif", "{ok}/trace-1.parquet"], "--out", "dir"),
    (["validate"], "--write", "file"),
    (["calibrate"], "--out", "file"),
    (["calibrate", "--out", "{ok}/c.yaml"], "--write", "file"),
    (["profile", "-m", "gpt3-1.7b", "--gbs", "8"], "--out", "file"),
    (["import-nccl-tests", "{ok}/missing.log"], "--out", "file"),
    (["fit-comm", "{ok}/missing.parquet"], "--out", "file"),
    (["fit-comm", "{ok}/missing.parquet"], "--system-out", "file"),
    (["merge-tables", "{ok}/a.parquet"], "--out", "file"),
]


def _ids(case: tuple[list[str], str, str]) -> str:
    return f"{case[0][0]}{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
@pytest.mark.parametrize("bad", ["missing-dir", "is-dir"])
def test_bad_output_path_is_one_line_error_before_computing(case, bad, tmp_path, capsys, monkeypatch):
    base, flag, kind = case
    ok = tmp_path / "ok"
    ok.mkdir()
    args = [a.replace("{ok}", str(ok)) for a in base]
    if bad == "missing-dir":
        path = tmp_path / "no-such-dir" / ("x" if kind == "dir" else "out.json")
    else:  # a directory where a file is expected, or a file where a directory is expected
        path = tmp_path / ("taken" if kind == "dir" else "taken.csv" if flag == "--csv" else "taken.parquet")
        if kind == "dir":
            path.write_text("a file")
        else:
            path.mkdir()

    def boom(*a, **k):  # the computation must not start
        raise AssertionError("computed before checking the output path")

    targets = ("trainsim.predictor.predict", "trainsim.search.search", "trainsim.whatif.WhatIf",
               "trainsim.validation.report.run_validation", "trainsim.profile.runner.profile_job",
               "trainsim.io.nccl_tests.read_nccl_tests", "trainsim.profile.fit_comm.fit_comm",
               "trainsim.cost.tables.merge_tables")
    for target in targets:  # imported before any patch, so no module binds a patched function at import
        importlib.import_module(target.rsplit(".", 1)[0])
    for target in targets:
        monkeypatch.setattr(target, boom)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, _, err = run([*args, flag, str(path)], capsys)
    check_one_line_error(code, err, flag)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, no temporary left


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    """A writer that fails halfway leaves neither a truncated target nor a temporary file."""
    import pandas as pd

    import trainsim.io.chrome as chrome

    target = tmp_path / "trace.json.gz"
    target.write_text("previous")

    def broken_open(path, *a, **k):
        with open(path, "w") as fh:  # half a file, then the disk fills up
            fh.write("{\"traceEvents\": [")
        raise OSError("disk full")

    monkeypatch.setattr(chrome.gzip, "open", broken_open)
    events = pd.DataFrame({"name": ["a"], "ts_s": [0.0], "dur_s": [1.0], "pid": [0], "tid": [0]})
    with pytest.raises(OSError, match="disk full"):
        chrome.write_chrome_trace(events, target)
    assert target.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json.gz"]


def test_search_csv_is_written_whole(tmp_path, capsys):
    out = tmp_path / "all.csv"
    code, _stdout, err = run([*SEARCH, "--tp", "1,2", "--pp", "1", "--csv", str(out)], capsys)
    assert code == 0, err
    assert out.read_text().count("\n") > 1
    assert [p.name for p in tmp_path.iterdir()] == ["all.csv"]


def test_search_output_of_the_wrong_type_is_refused_before_computing(tmp_path, capsys):
    code, _, err = run([*SEARCH, "--csv", str(tmp_path / "all.json")], capsys)
    check_one_line_error(code, err, "--csv", ".csv")
    assert not list(tmp_path.iterdir())
