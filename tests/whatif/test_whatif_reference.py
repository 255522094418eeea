"""The released traces: reproduce ``expected/`` for ST to 1e-5 and check SE/AR qualitatively.

Skipped when the shared data folder is absent (the synthetic tests keep the suite meaningful without it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainsim.whatif import WhatIf, analyze_trace

RTOL = 1e-5


@pytest.fixture(scope="module")
def st(traces: Path):
    return analyze_trace(traces / "trace-ST.parquet", traces / "meta-ST.yaml")


@pytest.fixture(scope="module")
def expected(traces: Path) -> dict:
    d = traces / "expected"
    return {name: json.loads((d / f"{name}-ST.json").read_text()) for name in ("result", "ms", "mw")}


def check_close(got: dict, want: dict) -> None:
    assert set(map(str, got)) == set(map(str, want))
    for k, v in want.items():
        assert got[str(k)] == pytest.approx(v, rel=RTOL), k


def test_slowdown_and_discrepancy(st, expected):
    res = expected["result"]
    assert st.slowdown == pytest.approx(res["blocking_slowdown"], rel=RTOL)
    assert st.discrepancy == pytest.approx(res["launch_slowdown"], rel=RTOL)
    assert st.wasted_gpu_fraction == pytest.approx(1 - 1 / res["blocking_slowdown"], rel=RTOL)


def test_step_times(st, expected):
    res = expected["result"]
    for key, table_col in (
        ("step_t_base", "actual_s"),
        ("step_t_nodelay", "simulated_s"),
        ("step_t_noblk", "ideal_s"),
    ):
        want = {int(k): v for k, v in res[key].items()}
        got = st.per_step[table_col].to_dict()
        assert set(got) == set(want)
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=RTOL), (key, k)
    check_close(st.to_dict()["slowdown_by_step"], res["blocking_step_slowdown"])


def test_attribution(st, expected):
    res = expected["result"]
    d = st.to_dict()
    check_close(d["slowdown_by_optype"], res["blocking_decompose_by_optype"])
    check_close(d["slowdown_by_stage"], res["blocking_decompose_by_stage"])
    check_close(d["slowdown_by_dp_rank"], res["blocking_decompose_by_dp_rank"])
    assert d["launch_delay_by_optype"] is None and res["launch_decompose_by_optype"] is None


def test_attribution_per_step(st, expected):
    res = expected["result"]
    for key, table in (
        ("blocking_decompose_by_optype_per_step", st.step_by_optype),
        ("blocking_decompose_by_stage_per_step", st.step_by_stage),
        ("blocking_decompose_by_dp_rank_per_step", st.step_by_dp_rank),
    ):
        for step, row in res[key].items():
            got = {str(c): float(v) for c, v in table.loc[int(step)].items()}
            check_close(got, row)


def test_shares(st, expected):
    ms, mw = expected["ms"], expected["mw"]
    assert st.last_stage_share == pytest.approx(ms["Ms"], rel=RTOL)
    assert st.last_stage_share_added == pytest.approx(ms["add"], rel=RTOL)
    assert st.worker_share == pytest.approx(mw["Mw"], rel=RTOL)
    assert st.worker_share_added == pytest.approx(mw["add"], rel=RTOL)
    assert st.step_time_simulated_s == pytest.approx(ms["tori"], rel=RTOL)
    assert st.step_time_ideal_s == pytest.approx(ms["tideal"], rel=RTOL)
    assert st.worker_share_cells == [(1, 3)]  # 8 traced ranks -> ceil(3 % of 8) = 1 worker, ties to the lower rank


def test_st_verdict(st):
    assert st.verdict == "last-stage"


def test_replay_reproduces_the_trace(traces: Path):
    for job in ("ST", "SE", "AR"):
        w = WhatIf(traces / f"trace-{job}.parquet")
        np.testing.assert_allclose(w.step_times("replay"), w.step_times("actual"), rtol=1e-9)


def test_se_and_ar_verdicts(traces: Path):
    # qualitative statements of the reference's readme: AR is one slow worker (M_W ~ 100 %, one highlighted
    # cell); SE is dominated by sequence-length imbalance but also has a long last stage (M_S ~ 68 %)
    ar = analyze_trace(traces / "trace-AR.parquet")
    assert ar.verdict == "worker"
    assert ar.worker_share is not None and ar.worker_share > 0.9
    assert len(ar.worker_share_cells) == 1
    se = analyze_trace(traces / "trace-SE.parquet")
    assert se.verdict == "sequence-imbalance"
    assert se.last_stage_share is not None and 0.5 < se.last_stage_share < 0.9
    assert len(se.worker_share_cells) == 2  # ceil(3 % of 64 traced ranks)
