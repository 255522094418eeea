"""The single-H100 source (own framework profiles, no per-row constant) and the ranking metrics."""

from __future__ import annotations

import math

import pytest

from trainsim.predictor import predict
from trainsim.validation.h100 import h100_measurements, load_h100_runs
from trainsim.validation.ranking import rank_groups, spearman, top1_regret


def test_h100_rows_are_modelled_with_their_own_stacks():
    runs = load_h100_runs()
    assert {r.framework for r in runs} == {"megatron-core-local", "hf-transformers"}
    for r in runs:
        assert r.job.world_size == 1 and r.job.framework.name == r.framework
    assert all(m.source == "h100" for m in h100_measurements())


def test_h100_times_and_memory_are_within_the_issue_targets():
    errs, mems = [], []
    for r in load_h100_runs():
        p = predict(r.job)
        errs.append(abs(p.iteration_time_s / r.measured_iter_s - 1))
        if r.memory_comparable:
            allocated = max(s.allocated_bytes for s in p.memory.per_stage)
            mems.append(abs(allocated / r.peak_alloc_bytes - 1))
    assert sum(errs) / len(errs) <= 0.10 and max(errs) <= 0.25
    assert sum(mems) / len(mems) <= 0.10 and max(mems) <= 0.25


def test_spearman_and_regret():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1], [1]))
    assert top1_regret([1.0, 1.2, 1.5], [3.0, 2.0, 4.0]) == pytest.approx(0.2)
    assert top1_regret([1.0, 1.2], [1.0, 2.0]) == 0.0
    groups = rank_groups([("s", "a", 1.0, 1.1), ("s", "a", 2.0, 1.0), ("s", "b", 1.0, 1.0)])
    assert len(groups) == 1 and groups[0].runs == 2 and groups[0].spearman == pytest.approx(-1.0)
    assert groups[0].regret == pytest.approx(1.0)
