"""Known answers on synthetic 1F1B traces with injected stragglers."""

from __future__ import annotations

import numpy as np
import pytest

from trainsim.whatif import IdealizeConfig, WhatIf, analyze_trace
from trainsim.whatif.synthetic import one_f_one_b, synthetic_trace


def test_one_f_one_b_order():
    assert one_f_one_b(0, 4, 4) == [
        ("F", 0),
        ("F", 1),
        ("F", 2),
        ("F", 3),
        ("B", 0),
        ("B", 1),
        ("B", 2),
        ("B", 3),
    ]
    assert one_f_one_b(3, 4, 4) == [
        ("F", 0),
        ("B", 0),
        ("F", 1),
        ("B", 1),
        ("F", 2),
        ("B", 2),
        ("F", 3),
        ("B", 3),
    ]
    assert one_f_one_b(1, 4, 4) == [
        ("F", 0),
        ("F", 1),
        ("F", 2),
        ("B", 0),
        ("F", 3),
        ("B", 1),
        ("B", 2),
        ("B", 3),
    ]


def test_no_straggler_gives_exactly_one():
    df, meta = synthetic_trace(pp=4, dp=2, microbatches=4, steps=3)
    r = analyze_trace(df, meta)
    assert r.slowdown == 1.0
    assert r.discrepancy == 1.0
    assert r.step_time_actual_s == r.step_time_simulated_s == r.step_time_ideal_s
    assert set(r.slowdown_by_optype.values()) == {1.0}
    assert set(r.slowdown_by_stage.values()) == {1.0}
    assert set(r.slowdown_by_dp_rank.values()) == {1.0}
    assert r.last_stage_share is None and r.worker_share is None  # nothing to explain
    assert r.wasted_gpu_fraction == 0.0
    assert r.verdict == "none"
    assert r.fwd_bwd_correlation is None  # no variation at all


def test_slow_stage_by_hand(hand_times):
    # pp=2, two micro-batches; stage 1 computes 2x slower (f=2, b=4 vs f=1, b=2), everything else is free.
    # Original 1F1B step: 15. Ideal (f=1.5, b=3 everywhere): 13.5. Stage 0 original in the ideal: 12;
    # stage 1 original in the ideal: 16.5; forward original: 14; backward original: 14.5 (worked out in
    # docs/whatif.md). M_S = (15 - 12) / (15 - 13.5) = 2.
    df, meta = synthetic_trace(pp=2, dp=2, microbatches=2, steps=2, times=hand_times)
    r = analyze_trace(df, meta)
    assert r.step_time_actual_s == 15.0
    assert r.step_time_simulated_s == 15.0
    assert r.step_time_ideal_s == 13.5
    assert r.slowdown == pytest.approx(15 / 13.5, rel=1e-15)
    assert r.slowdown_by_stage == pytest.approx({0: 12 / 13.5, 1: 16.5 / 13.5}, rel=1e-15)
    assert r.slowdown_by_optype["forward-compute"] == pytest.approx(14 / 13.5, rel=1e-15)
    assert r.slowdown_by_optype["backward-compute"] == pytest.approx(14.5 / 13.5, rel=1e-15)
    assert r.slowdown_by_optype["forward-pp-comm"] == 1.0
    # both replicas are identical and synchronise at the grad-norm barrier: each alone is the whole slowdown
    assert r.slowdown_by_dp_rank == pytest.approx({0: 15 / 13.5, 1: 15 / 13.5}, rel=1e-15)
    assert r.last_stage_share == pytest.approx(2.0, rel=1e-15)
    assert r.last_stage_share_added == pytest.approx((16.5 - 13.5) / 1.5, rel=1e-15)
    assert r.verdict == "last-stage"
    assert r.slowdown_by_step == pytest.approx({0: 15 / 13.5, 1: 15 / 13.5}, rel=1e-15)


def test_slow_stage_is_balanced_by_per_stage_idealization(hand_times):
    df, meta = synthetic_trace(pp=2, dp=1, microbatches=2, steps=2, times=hand_times)
    r = analyze_trace(df, meta, ideal=IdealizeConfig(group_by="optype-stage"))
    assert r.slowdown == 1.0


def test_replay_with_launch_delays_reproduces_the_trace():
    df, meta = synthetic_trace(
        pp=4,
        dp=2,
        microbatches=6,
        steps=4,
        launch_gap_s=0.0078125,
        first_op_gap_s=0.25,
        sequence_jitter=0.2,
        slow_workers={(1, 2): 1.3},
        seed=3,
    )
    w = WhatIf(df, meta)
    np.testing.assert_allclose(w.step_times("replay"), w.step_times("actual"), rtol=1e-12)
    assert (w.step_times("original") < w.step_times("actual")).all()
    # the injected gaps are recovered as launch delays of the forward computes
    delay = w.decomposition.launch_delay
    fwd = (w.model.ops["optype"] == "forward-compute").to_numpy()
    first = ((w.model.ops["stage"] == 0) & (w.model.ops["seq_id"] == 0)).to_numpy() & fwd
    np.testing.assert_allclose(delay[fwd & ~first], 0.0078125, atol=1e-12)
    np.testing.assert_allclose(delay[first], 0.25 + 0.0078125, atol=1e-12)
    np.testing.assert_allclose(delay[~fwd], 0.0, atol=1e-12)


def test_launch_delays_are_attributed_when_large():
    df, meta = synthetic_trace(pp=4, dp=2, microbatches=8, steps=3, launch_gap_s=0.0078125, first_op_gap_s=0.25)
    r = analyze_trace(df, meta)
    assert r.discrepancy > 1.03
    assert r.slowdown == 1.0
    assert r.launch_delay_by_optype is not None and r.launch_delay_by_stage is not None
    assert next(iter(r.launch_delay_by_optype)) == "first-op"  # data loading before the first forward dominates
    assert r.launch_delay_by_optype["backward-compute"] == 1.0
    assert r.launch_delay_by_stage[0] > 1.0
    quiet = analyze_trace(df, meta, launch_threshold=10.0)
    assert quiet.launch_delay_by_optype is None


def test_slow_worker_is_found():
    df, meta = synthetic_trace(pp=4, dp=4, microbatches=8, steps=3, slow_workers={(2, 1): 1.5})
    r = analyze_trace(df, meta)
    assert r.worker_share_cells == [(2, 1)]
    assert r.worker_share is not None and r.worker_share > 0.9
    assert max(r.slowdown_by_dp_rank, key=r.slowdown_by_dp_rank.get) == 2
    assert max(r.slowdown_by_stage, key=r.slowdown_by_stage.get) == 1
    assert r.verdict == "worker"
    assert r.per_rank.loc[r.per_rank["in_worker_share"]].index.tolist() == [1 * 4 + 2]


def test_sequence_imbalance_is_found():
    df, meta = synthetic_trace(pp=4, dp=4, microbatches=8, steps=4, sequence_jitter=0.3, seed=1)
    r = analyze_trace(df, meta)
    assert r.fwd_bwd_correlation == pytest.approx(1.0, abs=1e-9)  # the same factor scales both passes
    assert r.forward_time_cv is not None and r.forward_time_cv > 0.1
    assert r.slowdown > 1.05
    assert r.verdict == "sequence-imbalance"


def test_results_are_deterministic():
    df, meta = synthetic_trace(pp=3, dp=2, microbatches=4, steps=3, sequence_jitter=0.2, seed=7)
    a = analyze_trace(df, meta).to_dict()
    b = analyze_trace(df.sample(frac=1.0, random_state=0), meta).to_dict()  # row order does not matter
    assert a == b
