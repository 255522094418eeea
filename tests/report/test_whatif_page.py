"""The what-if (SMon) page: content, CLI flag, and behaviour in a real browser."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_helpers import check_one_line_error, run
from trainsim.report.browser import open_report
from trainsim.report.whatif import pattern_hints, timeline_steps, write_whatif_report
from trainsim.whatif import WhatIf, analyze, synthetic_trace


@pytest.fixture(scope="module")
def slow_worker_result():  # type: ignore[no-untyped-def]
    """A 4-stage × 4-replica job whose worker (dp 1, stage 2) computes 1.6× slower, with varying sequences."""
    trace, meta = synthetic_trace(pp=4, dp=4, microbatches=4, steps=5, slow_workers={(1, 2): 1.6},
                                  sequence_jitter=0.15, seed=3)
    return analyze(WhatIf(trace, meta))


def test_hints_name_the_slow_worker(slow_worker_result) -> None:  # type: ignore[no-untyped-def]
    hints = pattern_hints(slow_worker_result)
    assert any(h.startswith("Hot cell") and "dp 1, stage 2" in h for h in hints), hints


def test_timeline_budget_keeps_the_slowest_steps(slow_worker_result) -> None:  # type: ignore[no-untyped-def]
    r = slow_worker_result
    assert timeline_steps(r) == sorted(r.steps)  # small: every step
    per_step = r.session.model.num_ops * len(r.session.dp_ranks) * 2
    kept = timeline_steps(r, budget=3 * per_step)
    order = sorted(r.slowdown_by_step, key=lambda s: -r.slowdown_by_step[s])
    assert kept == sorted([order[0], order[1], order[-1]])


def test_page_in_the_browser_reacts_to_the_step(tmp_path, browser, slow_worker_result) -> None:  # type: ignore[no-untyped-def]
    r = slow_worker_result
    path = write_whatif_report(r, tmp_path / "w.html")
    loaded = open_report(browser, path)
    page = loaded.page
    try:
        page.wait_for_selector('body[data-ready="1"]')
        assert loaded.console_errors == [] and loaded.page_errors == [] and loaded.other_requests == []
        assert page.inner_text("#verdict") == f"verdict: {r.verdict}"
        assert page.inner_text("#head-card-0") == f"{r.slowdown:.3f}"
        mean_z = page.evaluate("() => document.getElementById('heatmap').data[0].z")
        assert np.allclose(np.array(mean_z, dtype=float), np.round(_mean_matrix(r), 4))
        worst = max(r.slowdown_by_step, key=lambda s: r.slowdown_by_step[s])
        best = min(r.slowdown_by_step, key=lambda s: r.slowdown_by_step[s])
        for step in (worst, best):
            page.select_option("#step-select", str(step))
            z = np.array(page.evaluate("() => document.getElementById('heatmap').data[0].z"), dtype=float)
            from trainsim.whatif.heatmap import step_worker_matrix

            assert np.allclose(z, np.round(step_worker_matrix(r, step), 4))
            assert page.inner_text("#step-caption").startswith(f"Step {step}: S = {r.slowdown_by_step[step]:.3f}")
            # the timeline shows that step: actual and ideal slices on two axes
            traces = page.evaluate("() => document.getElementById('timeline').data.map(t => [t.yaxis, t.x.length])")
            assert {t[0] for t in traces} == {"y", "y2"} and sum(t[1] for t in traces) > 0
        assert not np.allclose(z, mean_z)
        assert loaded.console_errors == [] and loaded.page_errors == [] and loaded.other_requests == []
    finally:
        page.close()


def _mean_matrix(r):  # type: ignore[no-untyped-def]
    from trainsim.whatif.heatmap import worker_matrix

    return worker_matrix(r)[0]


@pytest.mark.parametrize("job", ["ST", "SE", "AR"])
def test_released_traces_give_a_readable_page(tmp_path, shared, browser, capsys, job) -> None:  # type: ignore[no-untyped-def]
    traces = shared / "data" / "straggler-traces"
    out = tmp_path / f"whatif-{job}.html"
    code, stdout, err = run(["whatif", str(traces / f"trace-{job}.parquet"), "--html", str(out), "--json"], capsys)
    assert code == 0, err
    d = json.loads(stdout)
    assert out.stat().st_size < 7e6  # mailable: plotly.js (4.8 MB) plus the data
    loaded = open_report(browser, out)
    page = loaded.page
    try:
        page.wait_for_selector('body[data-ready="1"]')
        assert loaded.console_errors == [] and loaded.page_errors == [] and loaded.other_requests == []
        assert page.inner_text("#verdict") == f"verdict: {d['verdict']}"
        assert page.inner_text("#head-card-0") == f"{d['slowdown']:.3f}"
        before = page.evaluate("() => JSON.stringify(document.getElementById('heatmap').data[0].z)")
        step = max(d["slowdown_by_step"], key=lambda s: d["slowdown_by_step"][s])
        page.select_option("#step-select", step)
        after = page.evaluate("() => JSON.stringify(document.getElementById('heatmap').data[0].z)")
        assert after != before
        assert f"Step {step}" in page.inner_text("#step-caption")
    finally:
        page.close()


def test_html_path_is_checked_before_the_analysis(tmp_path, shared, capsys) -> None:  # type: ignore[no-untyped-def]
    trace = shared / "data" / "straggler-traces" / "trace-ST.parquet"
    code, _, err = run(["whatif", str(trace), "--html", str(tmp_path / "missing" / "w.html")], capsys)
    check_one_line_error(code, err, "--html", "does not exist")
