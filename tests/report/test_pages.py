"""Prediction, search and plan pages: content, ``--html`` on each command, behaviour in a real browser."""

from __future__ import annotations

import json

import pytest

from cli_helpers import check_one_line_error, run
from trainsim.cli.output import fmt_seconds
from trainsim.report.browser import open_report

PREDICT_SMALL = ["predict", "-m", "gpt3-7.5b", "-s", "dgx-a100", "-n", "64", "--tp", "2", "--pp", "4", "--gbs", "64",
                 "--train-tokens", "10e9"]
GPT3_SLOW_GPU = ["predict", "-m", "gpt3-175b", "-s", "dgx-a100", "-n", "1024", "--tp", "8", "--pp", "16", "--mbs", "1",
                 "--gbs", "1536", "--seq-length", "2048", "--recompute-granularity", "full", "--fp16",
                 "--train-tokens", "300e9", "--engine", "event", "--slow-rank", "17=1.5"]
MTNLG_SEARCH = ["search", "-m", "mt-nlg-530b", "-s", "dgx-a100", "--tp", "4,8,16", "--dp",
                "1,2,3,4,5,6,8,10,12,15,16,20,24,30", "--pp", "3,5,7,15,21,35,105", "--gbs", "1920",
                "--recompute-granularity", "full", "--train-tokens", "270e9", "--others", "default", "--objective",
                "cost", "--workers", "1", "--no-progress"]
PLAN_SMALL = ["plan", "-s", "dgx-a100", "-n", "256", "--days", "10", "--workers", "1", "--tp", "8", "--pp", "1,2,4",
              "--mbs", "1", "--recompute-granularity", "full"]


def _clean_load(loaded) -> None:  # type: ignore[no-untyped-def]
    assert loaded.console_errors == [], loaded.console_errors
    assert loaded.page_errors == [], loaded.page_errors
    assert loaded.other_requests == [], loaded.other_requests


def test_analytic_prediction_page(tmp_path, browser, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "p.html"
    code, stdout, err = run([*PREDICT_SMALL, "--json", "--html", str(out)], capsys)
    assert code == 0, err
    d = json.loads(stdout)
    loaded = open_report(browser, out)
    try:
        _clean_load(loaded)
        page = loaded.page
        assert page.inner_text("#sum-card-0") == fmt_seconds(d["iteration_time_s"])
        assert page.inner_text("#sum-card-2") == f"{d['mfu']:.1%} / {d['hfu']:.1%}"
        assert page.inner_text("#sum-card-3") == f"{d['training']['days']:,.1f} days"
        # the breakdown has one bar per non-zero category and they sum to the iteration
        xs = page.evaluate("() => document.getElementById('breakdown').data.map(t => t.x[0])")
        assert len(xs) == sum(1 for v in d["breakdown_s"].values() if v > 0)
        # memory: one stacked bar per stage, the capacity line drawn
        mem = page.evaluate("() => document.getElementById('memory').data[0].x.length")
        assert mem == d["job"]["pp"]
        assert page.locator("#timeline").count() == 0  # the analytic engine has no timeline
    finally:
        loaded.page.close()


def test_event_prediction_with_a_slow_gpu(tmp_path, browser, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "gpt3.html"
    code, stdout, err = run([*GPT3_SLOW_GPU, "--json", "--html", str(out)], capsys)
    assert code == 0, err
    d = json.loads(stdout)
    assert out.stat().st_size < 8e6
    loaded = open_report(browser, out)
    try:
        _clean_load(loaded)
        page = loaded.page
        assert page.inner_text("#straggler-slowdown") == f"{d['stragglers']['slowdown']:.3f}× slower"
        assert "GPU rank 17 computes 1.5× slower" in page.inner_text("#sec-summary")
        info = page.evaluate("""() => { const gd = document.getElementById('timeline');
            return {traces: gd.data.length, points: gd.data.reduce((a, t) => a + t.x.length, 0),
                    shaded: gd.layout.shapes.length, rows: gd.layout.yaxis.categoryarray}; }""")
        assert info["traces"] >= 4 and info["points"] > 1000
        slow_rows = [r for r in info["rows"] if "⚠×1.5" in r]
        assert slow_rows and info["shaded"] == len(slow_rows)
        assert all(r.startswith("st 0 · DP 2") for r in slow_rows)  # rank 17: stage 0 of replica 2
        n_mem = page.evaluate("() => document.getElementById('memory-time').data.length")
        assert n_mem == 16
    finally:
        loaded.page.close()


def test_mtnlg_search_page(tmp_path, browser, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "s.html"
    code, stdout, err = run([*MTNLG_SEARCH, "--top", "0", "--json", "--html", str(out)], capsys)
    assert code == 0, err
    d = json.loads(stdout)
    best, runner = d["candidates"][0], d["candidates"][1]
    loaded = open_report(browser, out)
    try:
        _clean_load(loaded)
        page = loaded.page
        assert page.inner_text("#best-plan") == f"tp {best['tp']} · pp {best['pp']} · dp {best['dp']}"
        why = page.inner_text("#why-lines")
        assert f"dp ({best['dp']} vs {runner['dp']})" in why
        front = page.evaluate("() => document.getElementById('pareto').data.find(t => t.name.startsWith('Pareto'))")
        assert len(front["x"]) == len(d["pareto"])
        assert "tp " in front["hovertext"][0]  # hover shows the plan
        rows = page.locator("#ranked-table tbody tr")
        assert rows.count() == len(d["candidates"])
        # sorting by MFU (descending on the second click) puts the highest MFU first
        head = page.locator("#ranked-table th", has_text="MFU")
        head.click()
        head.click()
        top_mfu = max(c["mfu"] for c in d["candidates"])
        assert page.inner_text("#ranked-table tbody tr:first-child td:nth-child(15)") == f"{top_mfu:.1%}"
        assert "do not fit in GPU memory" in page.inner_text("#sec-skipped")
    finally:
        loaded.page.close()


def test_plan_page(tmp_path, browser, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.html"
    code, stdout, err = run([*PLAN_SMALL, "--json", "--html", str(out)], capsys)
    assert code == 0, err
    d = json.loads(stdout)
    loaded = open_report(browser, out)
    try:
        _clean_load(loaded)
        page = loaded.page
        if d["optimal"]:
            assert page.inner_text("#optimal") == f"{d['optimal']['params'] / 1e9:,.1f} B parameters"
        assert page.locator("#shapes-table tbody tr").count() == len(d["search"]["evaluated"])
    finally:
        loaded.page.close()


@pytest.mark.parametrize("args", [PREDICT_SMALL, [*PREDICT_SMALL, "--engine", "event"], MTNLG_SEARCH, PLAN_SMALL],
                         ids=["predict", "predict-event", "search", "plan"])
def test_html_path_is_checked_first(tmp_path, capsys, args) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run([*args, "--html", str(tmp_path / "nowhere" / "r.html")], capsys)
    check_one_line_error(code, err, "--html", "does not exist")
    code, _, err = run([*args, "--html", str(tmp_path)], capsys)
    check_one_line_error(code, err, "--html", "is a directory")
