"""The dependency model built from one reference step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainsim.errors import TrainsimError
from trainsim.io.traces import TraceMeta
from trainsim.whatif import WhatIf, analyze_trace
from trainsim.whatif.synthetic import synthetic_trace


def _model(df: pd.DataFrame, meta: TraceMeta):
    return WhatIf(df, meta).model


def _deps(model, stage: int, optype: str, seq: int) -> set[str]:
    return {model.ops.at[int(u), "name"] for u in model.deps[model.op_id(stage, optype, seq)]}


def test_groups_and_dependencies(hand_times):
    df, meta = synthetic_trace(pp=2, dp=2, microbatches=2, steps=1, times=hand_times)
    m = _model(df, meta)
    sizes = sorted(len(g) for g in m.groups)
    # 4 send/recv pairs, all-gather + reduce-scatter per stage (DP-synchronised), embedding pair, grad-norm
    # barrier
    assert sizes == [1, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert m.group_dp_sync.sum() == 5
    assert not m.ops["no_op"].any()
    assert _deps(m, 1, "forward-compute", 1) == {"forward-recv_1_1", "backward-compute_0_1"}
    assert _deps(m, 1, "forward-recv", 1) == {"forward-recv_0_1", "forward-compute_0_1"}
    assert _deps(m, 0, "forward-send", 1) == {"forward-send_0_0", "forward-compute_1_0"}
    # first backward receive of stage 0 (order F0 F1 B0 B1) waits for the forward two positions before B0
    assert _deps(m, 0, "backward-recv", 0) == {"forward-compute_0_0"}
    assert _deps(m, 0, "forward-compute", 0) == {"params-all-gather_0_0"}
    assert _deps(m, 0, "gc", 0) == {"backward-compute_1_0"}
    assert _deps(m, 0, "grads-reduce-scatter", 0) == {
        "embedding-grads-all-reduce_0_0",
        "params-all-gather_0_0",
    }
    assert _deps(m, 1, "optimizer", 0) == {"optimizer-clip-main-grad_0_1"}
    assert [int(x) for x in m.compute_order[1]] == [
        m.op_id(1, t, k)
        for t, k in (
            ("forward-compute", 0),
            ("backward-compute", 0),
            ("forward-compute", 1),
            ("backward-compute", 1),
        )
    ]


def test_late_receive_is_a_no_op(hand_times):
    df, meta = synthetic_trace(pp=2, dp=1, microbatches=2, steps=2, times=hand_times)
    # a profiler artefact: an extra forward-recv posted at the end of every step on the last stage
    extra = df[(df.stage == 1) & (df.optype == "forward-recv") & (df.seq_id == 1)].copy()
    extra["seq_id"] = 2
    extra["start_ts"] = 14.0
    extra["duration"] = 0.5
    df2 = pd.concat([df, extra], ignore_index=True)
    m = _model(df2, meta)
    late = m.op_id(1, "forward-recv", 2)
    assert bool(m.ops.at[late, "no_op"])
    assert len(m.groups[int(m.ops.at[late, "group"])]) == 1
    assert analyze_trace(df2, meta).slowdown == analyze_trace(df, meta).slowdown


def test_missing_receive_on_a_middle_stage_is_an_error():
    df, meta = synthetic_trace(pp=3, dp=1, microbatches=3, steps=1)
    bad = df[~((df.stage == 1) & (df.optype == "forward-recv") & (df.seq_id == 2))]
    with pytest.raises(TrainsimError, match="stage 1 has 2 active forward-recv ops for 3 forward-compute"):
        analyze_trace(bad, meta)


def test_unmatched_send_is_an_error():
    df, meta = synthetic_trace(pp=2, dp=1, microbatches=3, steps=2)
    bad = df[~((df.stage == 1) & (df.optype == "forward-recv") & (df.seq_id == 2))]
    with pytest.raises(TrainsimError, match="unmatched pipeline communication: forward-send #2"):
        analyze_trace(bad, meta)


def test_tail_structure_errors():
    df, meta = synthetic_trace(pp=3, dp=1, microbatches=3, steps=1)
    with pytest.raises(TrainsimError, match="no 'optimizer' op"):
        analyze_trace(df[~((df.stage == 2) & (df.optype == "optimizer"))], meta)
    with pytest.raises(TrainsimError, match="optimizer-clip-main-grad is traced on stages"):
        analyze_trace(df[~((df.stage == 1) & (df.optype == "optimizer-clip-main-grad"))], meta)
    emb = df[(df.stage == 0) & (df.optype == "embedding-grads-all-reduce")].copy()
    emb["stage"] = 1
    emb["rank"] = df.loc[df.stage == 1, "rank"].iloc[0]
    with pytest.raises(TrainsimError, match="embedding-grads-all-reduce on stage 1"):
        analyze_trace(pd.concat([df, emb], ignore_index=True), meta)


def test_untraced_stage_is_an_error():
    df, _ = synthetic_trace(pp=2, dp=1, microbatches=2, steps=1)
    with pytest.raises(TrainsimError, match=r"stages \[2\] are not traced"):
        analyze_trace(df, {"trial_name": "x", "dp_size": 1, "pp_size": 3})


def test_interleaved_chunks_pair_across_the_pipeline_wrap():
    df, meta = synthetic_trace(pp=2, dp=2, microbatches=2, vpp=2, steps=2, sequence_jitter=0.1, seed=4)
    w = WhatIf(df, meta)
    m = w.model
    # sends/receives past either end of the model are no-ops (one-member groups)
    noops = set(m.ops.loc[m.ops["no_op"], "name"])
    assert noops == {
        "forward-recv_0_0",
        "forward-recv_1_0",
        "backward-send_2_0",
        "backward-send_3_0",
        "forward-send_2_1",
        "forward-send_3_1",
        "backward-recv_0_1",
        "backward-recv_1_1",
    }
    # stage 1's first-chunk sends reach stage 0's second chunk (peer stage wraps around)
    g = int(m.ops.at[m.op_id(1, "forward-send", 0), "group"])
    assert {m.ops.at[int(i), "name"] for i in m.groups[g]} == {"forward-send_0_1", "forward-recv_2_0"}
    # each chunk's first forward waits for that chunk's all-gather
    assert "params-all-gather_1_0" in {m.ops.at[int(u), "name"] for u in m.deps[m.op_id(0, "forward-compute", 2)]}
    # without launch delays the model replays the generator exactly
    np.testing.assert_allclose(w.step_times("original"), w.step_times("actual"), rtol=1e-12)
