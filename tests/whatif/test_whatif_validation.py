"""Invalid traces and options: a clear TrainsimError naming the rows, never a silent wrong answer."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from trainsim.errors import TrainsimError
from trainsim.whatif import WhatIf, analyze_trace, parse_steps
from trainsim.whatif.synthetic import synthetic_trace


@pytest.fixture
def trace():
    return synthetic_trace(pp=2, dp=2, microbatches=3, steps=[5, 6, 7])


def test_missing_column(trace):
    df, meta = trace
    with pytest.raises(TrainsimError, match=r"missing column\(s\) \['mc'\]"):
        analyze_trace(df.drop(columns="mc"), meta)


def test_wrong_dtype(trace):
    df, meta = trace
    with pytest.raises(TrainsimError, match="start_ts: has dtype"):
        analyze_trace(df.assign(start_ts=df.start_ts.astype(str)), meta)
    with pytest.raises(TrainsimError, match="dp_rank: has dtype float64, expected an integer"):
        analyze_trace(df.assign(dp_rank=df.dp_rank.astype(float)), meta)


def test_nan_and_negative_durations(trace):
    df, meta = trace
    bad = df.copy()
    bad.loc[[3, 9], "duration"] = np.nan
    with pytest.raises(TrainsimError, match=r"duration: missing values \(NaN/null\) at rows 3, 9"):
        analyze_trace(bad, meta)
    bad = df.copy()
    bad.loc[4, "duration"] = -0.5
    with pytest.raises(TrainsimError, match="negative durations at row 4"):
        analyze_trace(bad, meta)


def test_unknown_optype_and_duplicates(trace):
    df, meta = trace
    bad = df.copy()
    bad.loc[2, "optype"] = "forward-magic"
    with pytest.raises(TrainsimError, match=r"unknown operation type\(s\) \['forward-magic'\] at row 2"):
        analyze_trace(bad, meta)
    with pytest.raises(TrainsimError, match="duplicate"):
        analyze_trace(pd.concat([df, df.iloc[[0]]], ignore_index=True), meta)


def test_seq_id_gap(trace):
    df, meta = trace
    bad = df.copy()
    bad.loc[(bad.optype == "forward-compute") & (bad.seq_id == 2), "seq_id"] = 5
    with pytest.raises(TrainsimError, match=r"not numbered 0\.\.n-1"):
        analyze_trace(bad, meta)


def test_meta_disagrees_with_trace(trace):
    df, _ = trace
    with pytest.raises(TrainsimError, match="dp_rank: values >= dp_size = 1"):
        analyze_trace(df, {"trial_name": "x", "dp_size": 1, "pp_size": 2})
    with pytest.raises(TrainsimError, match="meta"):
        analyze_trace(df)  # a DataFrame needs its metadata


def test_step_with_a_missing_op(trace):
    df, meta = trace
    drop = (df.step == 6) & (df.dp_rank == 1) & (df.optype == "backward-send") & (df.seq_id == 2)
    with pytest.raises(TrainsimError, match="step 6, dp_rank 1: backward-send #2 on stage 1"):
        analyze_trace(df[~drop], meta)


def test_step_with_an_extra_op(trace):
    df, meta = trace
    extra = df[(df.step == 7) & (df.optype == "forward-compute") & (df.seq_id == 2)].copy()
    extra["seq_id"] = 3
    extra["start_ts"] += 100.0
    with pytest.raises(TrainsimError, match=r"absent from the reference step .*step 7, dp_rank 0: forward-compute #3"):
        analyze_trace(pd.concat([df, extra], ignore_index=True), meta)


def test_compute_order_differs(trace):
    df, meta = trace
    bad = df.copy()
    sel = (bad.step == 7) & (bad.dp_rank == 0) & (bad.stage == 1) & bad.optype.eq("forward-compute")
    bad.loc[sel & (bad.seq_id == 1), "start_ts"] = bad.loc[sel & (bad.seq_id == 0), "start_ts"].iloc[0] - 0.01
    with pytest.raises(TrainsimError, match="step 7, dp_rank 0, stage 1: compute order differs"):
        analyze_trace(bad, meta)


def test_step_selection(trace):
    df, meta = trace
    assert WhatIf(df, meta, steps=[6, 7]).steps.tolist() == [6, 7]
    with pytest.raises(TrainsimError, match=r"none of \[1, 2\] is in the trace.*\[5, 6, 7\]"):
        WhatIf(df, meta, steps=[1, 2])
    assert parse_steps("12, 20-23") == [12, 20, 21, 22, 23]
    for bad in ("x", "5-3", ","):
        with pytest.raises(TrainsimError):
            parse_steps(bad)


def test_negative_clock_skew_is_clipped_with_a_warning(trace):
    df, meta = trace
    bad = df.copy()
    sel = (bad.step == 6) & (bad.stage == 1) & (bad.optype == "optimizer")
    bad.loc[sel, "start_ts"] -= 0.5  # the optimizer "starts" long before its grad-norm all-reduce ended
    bad.loc[sel, "duration"] += 0.5
    with pytest.warns(UserWarning, match="launch delay"):
        w = WhatIf(bad, meta)
    assert (w.decomposition.launch_delay >= -0.01).all()
    assert w.decomposition.clipped_delays == 2


def test_clipping_that_breaks_the_replay_is_reported(trace):
    df, meta = trace
    bad = df.copy()
    sel = (bad.step == 6) & (bad.optype == "optimizer") & (bad.stage == 0) & (bad.dp_rank == 0)
    bad.loc[sel, "start_ts"] -= 0.5  # starts long before its dependency ended: the clipped delay moves its end
    bad.loc[sel, "duration"] += 0.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analyze_trace(bad, meta)
    messages = [str(w.message) for w in caught]
    assert any("launch delay(s) below -10 ms set to 0" in m for m in messages)
    assert any("re-simulating with the launch delays differs from the trace" in m for m in messages)


def test_trace_without_gc(trace):
    df, meta = trace
    with_gc = analyze_trace(df, meta)
    without = analyze_trace(df[df.optype != "gc"], meta)
    assert without.slowdown == with_gc.slowdown
    assert without.step_time_simulated_s == with_gc.step_time_simulated_s
