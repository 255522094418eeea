"""Custom what-if experiments on a prepared trace."""

from __future__ import annotations

import numpy as np
import pytest

from trainsim.errors import TrainsimError
from trainsim.io.traces import P2P_OPTYPES
from trainsim.whatif import WhatIf, pp_comm_free, stage_like_others
from trainsim.whatif.synthetic import synthetic_trace


@pytest.fixture
def hand(hand_times):
    df, meta = synthetic_trace(pp=2, dp=2, microbatches=2, steps=2, times=hand_times)
    return WhatIf(df, meta)


def test_op_table(hand):
    t = hand.op_table()
    assert len(t) == hand.model.num_ops * 2 * 2
    assert {
        "step",
        "dp_rank",
        "stage",
        "rank",
        "optype",
        "duration",
        "launch_delay",
        "measured_duration",
        "is_comm",
    } <= set(t.columns)
    assert (t["launch_delay"] == 0).all()
    ideal = hand.op_table("ideal")
    assert set(ideal.loc[ideal.optype == "forward-compute", "duration"]) == {1.5}


def test_identity_and_hand_computed_scenarios(hand):
    assert hand.simulate().step_time_s == 15.0
    assert hand.simulate(lambda t: None).speedup == 1.0  # in-place transform returning None
    # stage 1 at the mean of stage 0 (f=1, b=2 everywhere): 1F1B of pp=2, two micro-batches -> 9
    assert hand.simulate(stage_like_others(1)).step_time_s == 9.0
    assert hand.idealize(lambda t: t.stage == 1).step_time_s == 12.0
    assert hand.restore(lambda t: t.stage == 1).step_time_s == 16.5
    r = hand.simulate(base="ideal")
    assert r.step_time_s == 13.5 and r.slowdown == 1.0
    assert hand.simulate(pp_comm_free()).step_time_s == 15.0  # communication is already free here


def test_pp_comm_free_speeds_up_a_job_with_communication():
    df, meta = synthetic_trace(pp=4, dp=1, microbatches=4, steps=2)
    w = WhatIf(df, meta)
    r = w.simulate(pp_comm_free())
    assert r.speedup > 1.0
    manual = w.simulate(lambda t: t.assign(duration=t.duration.mask(t.optype.isin(P2P_OPTYPES), 0.0)))
    np.testing.assert_array_equal(r.step_time.to_numpy(), manual.step_time.to_numpy())


def test_actual_base_keeps_launch_delays():
    df, meta = synthetic_trace(pp=2, dp=1, microbatches=2, steps=2, launch_gap_s=0.125)
    w = WhatIf(df, meta)
    np.testing.assert_allclose(w.simulate(base="actual").step_time.to_numpy(), w.step_times("actual"), rtol=1e-12)
    no_gap = w.simulate(lambda t: t.assign(launch_delay=0.0), base="actual")
    np.testing.assert_allclose(no_gap.step_time.to_numpy(), w.step_times("original"), rtol=1e-12)


def test_transform_errors(hand):
    with pytest.raises(TrainsimError, match="keep its"):
        hand.simulate(lambda t: t.iloc[1:])
    with pytest.raises(TrainsimError, match="negative durations"):
        hand.simulate(lambda t: t.assign(duration=-1.0))
    with pytest.raises(TrainsimError, match="non-finite"):
        hand.simulate(lambda t: t.assign(duration=np.nan))
    with pytest.raises(TrainsimError, match="expected the op table"):
        hand.simulate(lambda t: 3)  # type: ignore[arg-type,return-value]
    with pytest.raises(TrainsimError, match="one boolean per op-table row"):
        hand.idealize(lambda t: t.stage)
    with pytest.raises(TrainsimError, match="stage 7 is not in the trace"):
        hand.simulate(stage_like_others(7))
