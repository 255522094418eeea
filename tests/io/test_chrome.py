"""Chrome/Perfetto trace writer."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainsim.errors import TrainsimError
from trainsim.io.chrome import write_chrome_trace


def _load(path: Path) -> dict:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt") as fh:
            return json.load(fh)
    return json.loads(path.read_text())


def _slices(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _assert_no_overlap(doc: dict) -> None:
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in _slices(doc):
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-6


def test_basic_events_and_metadata(tmp_path: Path):
    events = pd.DataFrame(
        {
            "pid": [0, 0, 1],
            "tid": [0, 1, 0],
            "name": ["fwd", "send", "fwd"],
            "ts_s": [0.0, 0.001, 0.0005],
            "dur_s": [0.002, 0.0005, 0.002],
            "step": [3, 3, 3],
            "bytes": [np.nan, 1024.0, np.nan],
        }
    )
    p = tmp_path / "t.json"
    info = write_chrome_trace(
        events,
        p,
        {0: "gpu 0", 1: "gpu 1"},
        {0: "compute", 1: "pp"},
        process_sort_index={0: 1, 1: 0},
        metadata={"run": "ideal"},
    )
    assert (info.events, info.trimmed, info.extra_threads) == (3, 0, 0)
    doc = _load(p)
    assert doc["otherData"] == {"run": "ideal"}
    s = sorted(_slices(doc), key=lambda e: (e["pid"], e["tid"]))
    assert s[0] == {
        "name": "fwd",
        "cat": "fwd",
        "ph": "X",
        "pid": 0,
        "tid": 0,
        "ts": 0.0,
        "dur": 2000.0,
        "args": {"step": 3},
    }
    assert s[1]["ts"] == 1000.0 and s[1]["args"] == {"step": 3, "bytes": 1024.0}
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert meta[("process_name", 0, 0)] == {"name": "gpu 0"}
    assert meta[("thread_name", 0, 1)] == {"name": "pp"}
    assert meta[("process_sort_index", 1, 0)] == {"sort_index": 0}


def test_overlaps_are_trimmed_or_moved(tmp_path: Path):
    events = pd.DataFrame(
        {
            "pid": [0, 0, 0, 0],
            "tid": [2, 2, 2, 2],
            "name": ["a", "b", "c", "d"],
            "ts_s": [0.0, 0.99995, 1.5, 3.0],  # b overlaps a by 50 us, c overlaps b by 0.5 s
            "dur_s": [1.0, 1.0, 1.0, 0.0],
        }
    )
    p = tmp_path / "t.json.gz"
    info = write_chrome_trace(events, p, thread_names={(0, 2): "compute"})
    assert info.trimmed == 1 and info.extra_threads == 1
    doc = _load(p)
    _assert_no_overlap(doc)
    by_name = {e["name"]: e for e in _slices(doc)}
    assert by_name["b"]["ts"] == 1e6 and by_name["b"]["dur"] == pytest.approx(999950.0)
    assert by_name["b"]["args"]["trimmed_us"] == pytest.approx(50.0)
    assert by_name["c"]["tid"] != 2
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names[by_name["c"]["tid"]] == "compute (overlap 1)"
    with pytest.raises(TrainsimError, match="slices overlap on pid 0, tid 2"):
        write_chrome_trace(events, tmp_path / "e.json", overlap="error")


def test_bad_events(tmp_path: Path):
    ok = pd.DataFrame({"pid": [0], "tid": [0], "name": ["a"], "ts_s": [0.0], "dur_s": [1.0]})
    with pytest.raises(TrainsimError, match="missing column"):
        write_chrome_trace(ok.drop(columns="dur_s"), tmp_path / "x.json")
    with pytest.raises(TrainsimError, match="negative duration"):
        write_chrome_trace(ok.assign(dur_s=-1.0), tmp_path / "x.json")
    with pytest.raises(TrainsimError, match="overlap"):
        write_chrome_trace(ok, tmp_path / "x.json", overlap="stack")  # type: ignore[arg-type]


def test_whatif_timelines_never_overlap(tmp_path: Path):
    from trainsim.whatif import WhatIf
    from trainsim.whatif.synthetic import synthetic_trace

    df, meta = synthetic_trace(pp=3, dp=2, microbatches=4, steps=2, sequence_jitter=0.1)
    w = WhatIf(df, meta)
    for which in ("actual", "ideal"):
        p = tmp_path / f"{which}.json"
        w.write_timeline(p, which)
        doc = _load(p)
        _assert_no_overlap(doc)
        assert len(_slices(doc)) == len(df)
