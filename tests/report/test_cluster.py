"""The cluster page from a small synthetic run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainsim.errors import TrainsimError
from trainsim.report.cluster import utilisation_series, write_cluster_report


def synthetic_run() -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    jobs = pd.DataFrame({
        "job_id": ["j0", "j1", "j2", "j3"], "model": ["gpt3-7.5b", "llama3-8b", "gpt3-7.5b", "gpt3-175b"],
        "tenant": ["a", "b", "a", "b"], "submit_time_s": [0.0, 100.0, 200.0, 300.0],
        "admitted": [True, True, True, False], "reject_reason": [None, None, None, "fits on no pool"],
        "first_start_s": [0.0, 150.0, 3600.0, np.nan], "end_s": [3600.0, 7300.0, 9000.0, np.nan],
        "deadline_s": [4000.0, 7000.0, np.nan, 5000.0], "met_deadline": [True, False, None, False],
        "jct_s": [3600.0, 7200.0, 8800.0, np.nan], "queue_s": [0.0, 50.0, 3400.0, np.nan],
        "gpu_hours": [64.0, 120.0, 96.0, 0.0], "cost_usd": [128.0, 240.0, 192.0, 0.0], "restarts": [0, 1, 0, 0],
        "lost_gpu_hours": [0.0, 3.5, 0.0, 0.0], "plans": ["tp 8 · pp 1 · dp 8", "tp 4 · pp 2 · dp 8", "tp 8", ""],
    })
    allocations = pd.DataFrame({
        "job_id": ["j0", "j1", "j1", "j2"], "t0_s": [0.0, 150.0, 4000.0, 3600.0],
        "t1_s": [3600.0, 3900.0, 7300.0, 9000.0], "pool": ["a100", "h100", "h100", "a100"],
        "nodes": ["n0:8;n1:8", "n2:8;n3:8", "n2:8;n3:8", "n0:8"], "gpus": [16, 16, 16, 8], "tp": [8, 4, 4, 8],
        "pp": [1, 2, 2, 1], "dp": [2, 2, 2, 1], "iter_time_s": [1.2, 2.3, 2.3, 0.9],
    })
    metrics = {"dsr": 1 / 3, "n_with_deadline": 3, "n_met": 1, "n_rejected": 1, "jct_mean_s": 6533.3,
               "makespan_s": 9000.0, "gpu_util": 0.61, "cost_usd": 560.0, "restarts": 1, "policy": "edf",
               "fairness": {"jain_tenant_gpu_hours": 0.8, "ftf_max": 2.5}, "num_gpus": 32}
    return jobs, allocations, metrics


def test_utilisation_is_a_step_function_of_allocated_gpus() -> None:
    _, alloc, _ = synthetic_run()
    series = utilisation_series(alloc)
    t, g = series["h100"]
    assert t.tolist() == [150.0, 3900.0, 4000.0, 7300.0]
    assert g.tolist() == [16.0, 0.0, 16.0, 0.0]
    t, g = series["a100"]
    # j0 ends when j2 starts: the level at 3600 s is j2's 8 GPUs, not 16 + 8
    assert t.tolist() == [0.0, 3600.0, 9000.0]
    assert g.tolist() == [16.0, 8.0, 0.0]


def test_writes_one_self_contained_page(tmp_path) -> None:
    jobs, alloc, metrics = synthetic_run()
    out = write_cluster_report(jobs, alloc, metrics, tmp_path / "cluster.html")
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "33.3 %" in html  # the DSR card
    assert "fits on no pool" in html
    assert "fairness jain tenant gpu hours" in html and "capacity 32 GPUs" in html
    assert 'id="gantt"' in html and 'id="utilisation"' in html and 'id="jct-cdf"' in html
    assert "<script src" not in html and "<link" not in html
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.html"]  # atomic write leaves no temporary file


def test_missing_column_is_one_named_error(tmp_path) -> None:
    jobs, alloc, metrics = synthetic_run()
    with pytest.raises(TrainsimError, match=r"allocations.*iter_time_s"):
        write_cluster_report(jobs, alloc.drop(columns="iter_time_s"), metrics, tmp_path / "x.html")


def test_cluster_page_in_the_browser(tmp_path, browser) -> None:
    from trainsim.report.browser import open_report

    jobs, alloc, metrics = synthetic_run()
    path = write_cluster_report(jobs, alloc, metrics, tmp_path / "cluster.html")
    loaded = open_report(browser, path)
    try:
        assert loaded.console_errors == [] and loaded.page_errors == []
        assert loaded.other_requests == []
        assert loaded.page.inner_text("#metric-card-0") == "33.3 %"
        # one bar per allocation: the Gantt has a path per pool, and the table a row per job
        assert loaded.page.locator("#jobs-table tbody tr").count() == 4
        assert loaded.page.locator("#gantt .scatterlayer .trace").count() == 3  # two pools and the deadlines
        # sorting by JCT puts the longest job first on the second click
        head = loaded.page.locator("#jobs-table th", has_text="JCT s")
        head.click()
        head.click()
        assert loaded.page.inner_text("#jobs-table tbody tr:first-child td:first-child") == "j2"
    finally:
        loaded.page.close()
