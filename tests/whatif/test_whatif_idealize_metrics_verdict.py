"""Idealization statistics, metric helpers and the verdict rule."""

from __future__ import annotations

import numpy as np
import pytest

from trainsim.errors import TrainsimError
from trainsim.whatif import IdealizeConfig, VerdictRule, analyze_trace
from trainsim.whatif.idealize import statistic
from trainsim.whatif.metrics import added_share, share, worker_count, worst_workers
from trainsim.whatif.synthetic import TraceOpTimes, synthetic_trace
from trainsim.whatif.verdict import decide


def test_statistics():
    v = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    assert statistic(v, "mean") == 22.0
    assert statistic(v, "median") == 3.0
    assert statistic(v, "trimmed-mean", 0.2) == 3.0
    assert statistic(np.arange(10.0), "trimmed-mean", 0.1) == 4.5
    with pytest.raises(TrainsimError):
        statistic(v, "mode")


def test_config_validation():
    for kwargs in ({"group_by": "rank"}, {"compute_stat": "max"}, {"trim_fraction": 0.5}):
        with pytest.raises(TrainsimError):
            IdealizeConfig(**kwargs)  # type: ignore[arg-type]


def test_idealization_statistic_changes_the_ideal():
    times = TraceOpTimes.compute_only(forward=[1.0, 1.0], backward=[2.0, 2.0])
    df, meta = synthetic_trace(pp=2, dp=4, microbatches=2, steps=1, times=times, slow_workers={(3, 1): 5.0})
    mean = analyze_trace(df, meta)
    median = analyze_trace(df, meta, ideal=IdealizeConfig(compute_stat="median"))
    assert median.step_time_ideal_s == 9.0  # the median worker: f=1, b=2 -> 1F1B step of 9
    assert mean.step_time_ideal_s > median.step_time_ideal_s
    assert median.slowdown > mean.slowdown
    assert median.idealization["compute_stat"] == "median"


def test_shares():
    assert share(10.0, 8.0, 6.0) == 0.5
    assert added_share(10.0, 7.0, 6.0) == 0.25
    assert share(6.0, 6.0, 6.0) is None and added_share(6.0, 6.0, 6.0) is None


def test_worker_selection():
    assert [worker_count(n) for n in (8, 16, 64, 100, 101)] == [1, 1, 2, 3, 4]
    cells = [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]  # (rank, dp_rank, stage)
    by_dp = {0: 1.2, 1: 1.2}
    by_stage = {0: 1.1, 1: 1.3}
    assert worst_workers(cells, by_dp, by_stage, 1) == [(2, 0, 1)]  # tie between ranks 2 and 3 -> lower rank
    assert worst_workers(cells, by_dp, by_stage, 3) == [(2, 0, 1), (3, 1, 1), (0, 0, 0)]


def test_verdict_rule():
    assert decide(1.01, 0.9, 0.9, 0.3, 0.9)[0] == "none"
    assert decide(1.5, 0.9, 0.9, 0.3, 0.9)[0] == "worker"
    assert decide(1.5, 0.1, 0.9, 0.3, 0.9)[0] == "sequence-imbalance"
    assert decide(1.5, 0.1, 0.9, 0.01, 0.9)[0] == "last-stage"
    assert decide(1.5, 0.1, 0.2, 0.01, 0.2)[0] == "none"
    assert decide(1.5, None, None, None, None)[0] == "none"
    assert decide(1.02, 0.9, None, None, None, VerdictRule(min_slowdown=1.01))[0] == "worker"
