"""Trace and cluster-spec validation: one-line errors naming row and field."""

from __future__ import annotations

import pandas as pd
import pytest

from trainsim.cluster.spec import load_cluster, parse_failures, parse_stragglers
from trainsim.cluster.trace import validate_trace
from trainsim.errors import TrainsimError


def check_rejected(df: pd.DataFrame, *words: str) -> None:
    with pytest.raises(TrainsimError) as exc:
        validate_trace(df)
    for w in words:
        assert w in str(exc.value), str(exc.value)


def test_valid_trace_is_sorted_and_typed(trace: pd.DataFrame) -> None:
    df = validate_trace(trace.iloc[::-1])
    assert list(df["job_id"]) == [f"j{i}" for i in range(len(trace))]
    assert df["weight"].eq(1.0).all() and df["tenant"].eq("default").all()


def test_duplicate_job_id(trace: pd.DataFrame) -> None:
    trace.loc[3, "job_id"] = "j1"
    check_rejected(trace, "row 4", "job_id", "duplicates")


def test_deadline_before_submit(trace: pd.DataFrame) -> None:
    trace.loc[2, "deadline_s"] = 10.0
    check_rejected(trace, "row 3", "deadline_s", "not after")


def test_unknown_model(trace: pd.DataFrame) -> None:
    trace.loc[5, "model"] = "gpt-17"
    check_rejected(trace, "row 6", "model", "unknown preset")


def test_negative_work(trace: pd.DataFrame) -> None:
    trace.loc[1, "iterations"] = -5
    check_rejected(trace, "row 2", "iterations", "positive")


def test_not_a_number_and_unknown_column(trace: pd.DataFrame) -> None:
    t2 = trace.copy()
    t2["requested_gpus"] = t2["requested_gpus"].astype(object)
    t2.loc[0, "requested_gpus"] = "lots"
    check_rejected(t2, "row 1", "requested_gpus", "not a number")
    check_rejected(trace.assign(colour="red"), "colour", "not a trace column")


def test_iterations_or_tokens(trace: pd.DataFrame) -> None:
    check_rejected(trace.drop(columns=["iterations"]), "row 1", "iterations", "neither")
    check_rejected(trace.assign(train_tokens=1e9), "train_tokens", "both")


def test_min_max_and_plan(trace: pd.DataFrame) -> None:
    check_rejected(trace.assign(min_gpus=64, max_gpus=8), "min_gpus", "exceeds")
    check_rejected(trace.assign(plan="tp2"), "plan", "t<TP>p<PP>")


def test_cluster_spec_strict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = load_cluster({"pools": [{"name": "a", "system": "dgx-a100", "nodes": 4}], "topology": {"nodes_per_rack": 2}})
    assert c.num_gpus == 32
    with pytest.raises(TrainsimError, match="unknown field"):
        load_cluster({"pools": [{"name": "a", "system": "dgx-a100", "nodes": 4, "colour": 1}]})
    with pytest.raises(TrainsimError, match="duplicate pool"):
        load_cluster({"pools": [{"name": "a", "system": "dgx-a100", "nodes": 4}] * 2})
    with pytest.raises(TrainsimError, match="system"):
        load_cluster({"pools": [{"name": "a", "system": "dgx-z900", "nodes": 4}]})
    y = tmp_path / "c.yaml"
    y.write_text("pools:\n  - {name: a, system: dgx-h100, nodes: 2, price_per_gpu_hour: 3.5}\n"
                 "failures: {node_mtbf_h: 10}\n")
    c = load_cluster(y)
    assert c.pools[0].price == 3.5 and c.failures is not None and c.failures.repair_h == 4.0
    assert load_cluster("dgx-a100:3").num_gpus == 24


def test_cli_forms() -> None:
    f = parse_failures("node_mtbf_h=100,repair_h=2,restart_s=60")
    assert (f.node_mtbf_h, f.repair_h, f.restart_s) == (100, 2, 60)
    s = parse_stragglers("rate_per_node_day=0.5,slowdown=2")
    assert (s.rate_per_node_day, s.slowdown) == (0.5, 2)
    with pytest.raises(TrainsimError, match="unknown key"):
        parse_failures("mtbf=3")
    with pytest.raises(TrainsimError, match="required"):
        parse_stragglers("slowdown=2")
