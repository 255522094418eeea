"""Trace schemas: metadata, released-schema validation and writing, rich schema, loading."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainsim.errors import TrainsimError
from trainsim.io.traces import (
    RELEASED_SCHEMA,
    RICH_SCHEMA,
    TraceMeta,
    load_trace,
    meta_from_mapping,
    meta_path_beside,
    read_meta,
    read_op_trace,
    read_rich_trace,
    rich_to_released,
    validate_op_trace,
    validate_rich_trace,
    write_op_trace,
    write_rich_trace,
)
from trainsim.whatif.synthetic import synthetic_trace


def _traces_dir() -> Path:
    env = os.environ.get("TRAINSIM_SHARED")
    base = Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared"
    return base / "data" / "straggler-traces"


# ---- metadata ----------------------------------------------------------------------------------------------
def test_meta_defaults_and_checks(tmp_path: Path):
    m = meta_from_mapping({"trial_name": "J", "dp_size": 2, "pp_size": 4})
    assert (m.tp_size, m.dsp_size, m.vpp_size, m.world_size, m.run_id) == (1, 1, 1, 8, 0)
    for bad, match in (
        ({"trial_name": "J", "pp_size": 2}, "dp_size: missing"),
        ({"trial_name": "J", "dp_size": 0, "pp_size": 2}, "dp_size: must be >= 1"),
        ({"trial_name": "J", "dp_size": "2", "pp_size": 2}, "must be an integer"),
        ({"trial_name": "J", "dp_size": 2, "pp_size": 2, "world_size": 5}, "world_size: 5 != "),
        ({"trial_name": "J", "dp_size": 2, "pp_size": 2, "dpp_size": 1}, "unknown metadata key"),
        ({"trial_name": "", "dp_size": 2, "pp_size": 2}, "trial_name"),
        (["dp_size", 2], "expected a mapping"),
    ):
        with pytest.raises(TrainsimError, match=match):
            meta_from_mapping(bad)  # type: ignore[arg-type]
    p = tmp_path / "meta.yaml"
    p.write_text("trial_name: J\ndp_size: [2\n")
    with pytest.raises(TrainsimError, match="not valid YAML"):
        read_meta(p)
    with pytest.raises(TrainsimError, match="file not found"):
        read_meta(tmp_path / "none.yaml")


def test_meta_path_beside():
    assert meta_path_beside("/d/trace-AR.parquet") == Path("/d/meta-AR.yaml")
    assert meta_path_beside("run.parquet") == Path("meta-run.yaml")


def test_released_files_validate():
    d = _traces_dir()
    if not (d / "trace-ST.parquet").is_file():
        pytest.skip(f"released straggler traces not found at {d}")
    for job in ("ST", "SE", "AR"):
        meta = read_meta(d / f"meta-{job}.yaml")
        df = validate_op_trace(read_op_trace(d / f"trace-{job}.parquet"), meta)
        assert list(df.columns) == list(RELEASED_SCHEMA)
        assert df["start_ts"].dtype == np.float64 and df["step"].dtype == np.int64


# ---- released schema ---------------------------------------------------------------------------------------
def test_write_op_trace_round_trip(tmp_path: Path):
    df, meta = synthetic_trace(pp=2, dp=2, microbatches=2, steps=2)
    shifted = df.copy()
    shifted["start_ts"] += np.where(shifted["step"] == 1, 1000.0, 0.0)  # absolute times are rebased per step
    write_op_trace(shifted, meta, tmp_path / "trace-S.parquet", tmp_path / "meta-S.yaml")
    raw = pd.read_parquet(tmp_path / "trace-S.parquet")
    assert {c: str(raw[c].dtype) for c in RELEASED_SCHEMA} == RELEASED_SCHEMA
    back, m2 = load_trace(tmp_path / "trace-S.parquet")
    assert m2 == meta
    want = validate_op_trace(df, meta).sort_values(["step", "rank", "optype", "seq_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(back, want, check_exact=False, rtol=1e-6, atol=1e-6)


def test_write_widens_integers(tmp_path: Path):
    df, _ = synthetic_trace(pp=2, dp=1, microbatches=1, steps=1)
    df["dp_rank"] = 200
    meta = TraceMeta(trial_name="W", dp_size=256, pp_size=2)
    write_op_trace(df, meta, tmp_path / "t.parquet", tmp_path / "m.yaml")
    raw = pd.read_parquet(tmp_path / "t.parquet")
    assert str(raw["dp_rank"].dtype) == "int16" and (raw["dp_rank"] == 200).all()


def test_validation_messages():
    df, _ = synthetic_trace(pp=2, dp=1, microbatches=2, steps=1)
    with pytest.raises(TrainsimError, match="has no rows"):
        validate_op_trace(df.iloc[:0])
    with pytest.raises(TrainsimError, match="expected a pandas DataFrame"):
        validate_op_trace([1, 2])  # type: ignore[arg-type]
    bad = df.copy()
    bad.loc[1, "start_ts"] = np.inf
    with pytest.raises(TrainsimError, match="non-finite start times at row 1"):
        validate_op_trace(bad)
    bad = df.copy()
    bad.loc[bad["stage"] == 1, "rank"] = 0
    with pytest.raises(TrainsimError, match="rank 0 appears with several"):
        validate_op_trace(bad)
    bad = df.copy()
    bad.loc[0, "mc"] = -5
    with pytest.raises(TrainsimError, match="mc: values below -1 at row 0"):
        validate_op_trace(bad)
    bad = df.copy()
    bad["optype"] = 3
    with pytest.raises(TrainsimError, match="expected strings"):
        validate_op_trace(bad)


def test_corrupt_parquet(tmp_path: Path):
    p = tmp_path / "trace-C.parquet"
    p.write_bytes(b"PAR1 garbage")
    with pytest.raises(TrainsimError, match="cannot read parquet"):
        read_op_trace(p)
    with pytest.raises(TrainsimError, match="file not found"):
        read_op_trace(tmp_path / "x.parquet")


# ---- rich schema -------------------------------------------------------------------------------------------
def _rich_from(df: pd.DataFrame, base_ns: int = 1_700_000_000_000_000_000) -> pd.DataFrame:
    """A rich-schema table equivalent to a released one (two tensor-parallel ranks per GPU)."""
    step_base = base_ns + df["step"].to_numpy() * 10_000_000_000
    start = step_base + np.round(df["start_ts"].to_numpy() * 1e9).astype(np.int64)
    end = start + np.round(df["duration"].to_numpy() * 1e9).astype(np.int64)
    p2p = df["optype"].str.contains("send|recv").to_numpy()
    direction = df["optype"].str.split("-").str[0]
    # the link between stages low and low+1: a forward send / backward receive sits on its low end
    upper_end = df["optype"].isin(["forward-recv", "backward-send"]).to_numpy()
    low = (df["stage"] - upper_end).astype(str)
    link = "pp-" + direction + "-dp" + df["dp_rank"].astype(str) + "-" + low
    rows = []
    for tp in (0, 1):
        rows.append(
            pd.DataFrame(
                {
                    "step": df["step"],
                    "rank": df["rank"] * 2 + tp,
                    "dp_rank": df["dp_rank"],
                    "pp_rank": df["stage"],
                    "tp_rank": tp,
                    "cp_rank": 0,
                    "ep_rank": 0,
                    "stream": np.where(p2p, "pp", "compute"),
                    "optype": df["optype"],
                    "start_ns": start + tp * 1000,
                    "end_ns": end + tp * 1000,
                    "mc": df["mc"],
                    "gmc": df["gmc"],
                    "mb_id": df["mb_id"],
                    "group_id": np.where(p2p, link + f"-tp{tp}", ""),
                    "group_seq": np.where(p2p, df["seq_id"], -1),
                    "bytes": np.where(p2p, 1 << 20, 0),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def test_rich_round_trip_and_conversion(tmp_path: Path):
    df, meta = synthetic_trace(pp=3, dp=2, microbatches=3, steps=2)
    meta = dataclasses.replace(meta, tp_size=2, world_size=0)  # two tensor-parallel ranks per traced GPU
    rich = _rich_from(df)
    validate_rich_trace(rich)
    path = tmp_path / "run.parquet"
    write_rich_trace(rich, meta, path)
    back, m2 = read_rich_trace(path)
    assert m2 == meta
    assert {c: str(back[c].dtype) for c in RICH_SCHEMA if RICH_SCHEMA[c] != "string"} == {
        c: t for c, t in RICH_SCHEMA.items() if t != "string"
    }
    released = rich_to_released(back)
    assert released["rank"].nunique() == 6 and (released["rank"] % 2 == 0).all()  # tp rank 0 only
    want = validate_op_trace(df)
    key = ["step", "dp_rank", "stage", "optype", "seq_id"]
    got = released.sort_values(key).reset_index(drop=True)
    want = want.sort_values(key).reset_index(drop=True)
    np.testing.assert_allclose(got["start_ts"], want["start_ts"], atol=2e-9)
    np.testing.assert_allclose(got["duration"], want["duration"], atol=2e-9)
    # the analysis accepts the rich file directly, metadata included
    from trainsim.whatif import analyze_trace

    assert analyze_trace(path).slowdown == pytest.approx(analyze_trace(df, meta).slowdown, rel=1e-6)


def test_rich_validation():
    df, _ = synthetic_trace(pp=2, dp=1, microbatches=2, steps=1)
    rich = _rich_from(df)
    with pytest.raises(TrainsimError, match="start_ns: has dtype"):
        validate_rich_trace(rich.assign(start_ns=rich["start_ns"] * 1e-9))
    bad = rich.copy()
    bad.loc[3, "end_ns"] = bad.loc[3, "start_ns"] - 1
    with pytest.raises(TrainsimError, match="end before start at row 3"):
        validate_rich_trace(bad)
    sends = rich.index[rich["optype"].eq("forward-send") & rich["tp_rank"].eq(0)]
    bad = rich.drop(index=rich.index[rich["optype"].eq("forward-recv") & rich["tp_rank"].eq(0)][:1])
    with pytest.raises(TrainsimError, match="unmatched pipeline send/receive"):
        validate_rich_trace(bad)
    assert len(sends) > 0
    with pytest.raises(TrainsimError, match="no operations on tp_rank=5"):
        rich_to_released(rich, tp_rank=5)
