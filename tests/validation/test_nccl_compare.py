"""The public nccl-tests comparison: every point sourced and priced, and the model beating a latency-free baseline."""

import math
import statistics

import pytest

from trainsim.cost.calibration import calibration_for
from trainsim.cost.comm import Placement, nccl_links
from trainsim.io.frames import rows_as
from trainsim.spec.presets import list_systems
from trainsim.validation.nccl_compare import (
    KINDS,
    SCALES,
    _PublicRow,
    bus_factor,
    compare,
    load_public,
    mean_abs_error,
    nccl_section,
    row_system,
    summarise,
)


def test_every_public_point_has_a_source_and_a_system():
    df = load_public()
    assert len(df) >= 40 and df["id"].is_unique
    assert df["source_url"].str.startswith("https://").all()
    assert set(df["kind"]) <= set(KINDS)
    assert set(df["system"]) <= set(list_systems())
    assert set(df["collective"]) <= {"all_reduce", "all_gather", "reduce_scatter"}
    assert (df["ranks"] % df["nodes"] == 0).all() and (df["nodes"] >= 1).all()
    assert (df["busbw_gb_s"].notna() | df["time_us"].notna()).all()
    assert df["notes"].notna().all()  # the exact machine, command or quote
    for r in rows_as(df, _PublicRow):
        system = row_system(r)
        assert system.gpus_per_node >= r.ranks // r.nodes, r.id
        if r.nodes > 1:
            assert not math.isnan(r.nic_per_node) or r.system == "dgx-h100", r.id  # preset's NICs only where true


def test_every_scale_is_covered_and_priced():
    rows = compare()
    assert len(rows) == len(load_public())
    assert {c.scale for c in rows} == set(SCALES)
    assert {c.collective for c in rows} == {"all_reduce", "all_gather", "reduce_scatter"}
    for c in rows:
        assert c.predicted_busbw > 0 and c.published_busbw > 0, c.id
        if c.forced:
            assert c.algorithm in c.id, c.id  # a forced algorithm is the one priced


def test_time_derived_busbw_uses_the_nccl_tests_formula():
    df = load_public().set_index("id")
    rows = {c.id: c for c in compare()}
    derived = [c for c in rows.values() if c.time_derived]
    assert derived
    for c in derived:
        t = df.loc[c.id, "time_us"] * 1e-6
        assert c.published_busbw == pytest.approx(c.nbytes / t * 2 * (c.ranks - 1) / c.ranks)
    assert bus_factor("all_gather", 8) == pytest.approx(7 / 8)


def _baseline(rows):
    """The calibrated bus bandwidth of each point's slowest hop: no latency, no protocol ramp, no algorithm choice."""
    out = []
    for r, c in zip(rows_as(load_public(), _PublicRow), rows, strict=True):
        system = row_system(r)
        links = nccl_links(Placement(c.ranks, -(-c.ranks // c.nodes), c.nodes), system,
                           calibration_for(system.gpu.generation), c.nodes)
        out.append(links.bus_bandwidth)
    return out


def test_model_beats_the_latency_free_baseline():
    rows = compare()
    base = _baseline(rows)
    big = [(c, b) for c, b in zip(rows, base, strict=True) if c.nbytes >= 256 << 20]
    assert mean_abs_error(c for c, _ in big) < statistics.mean(abs(b / c.published_busbw - 1) for c, b in big)
    for c, _ in big:  # bandwidth-bound points: within a factor of two of what was measured
        assert 0.5 < c.predicted_busbw / c.published_busbw < 2.0, c.id
    raw = [(c, b) for c, b in zip(rows, base, strict=True) if c.kind == "raw"]
    model_log = statistics.mean(abs(math.log(c.predicted_busbw / c.published_busbw)) for c, _ in raw)
    base_log = statistics.mean(abs(math.log(b / c.published_busbw)) for c, b in raw)
    assert model_log < base_log / 2  # the latency and protocol ramp must account for most of the small-size gap


def test_summaries_group_every_point():
    rows = compare()
    stats = summarise(rows, lambda c: c.scale, SCALES)
    assert sum(s.n for s in stats) == len(rows)
    for s in stats:
        assert s.max_abs_error >= s.mean_abs_error >= abs(s.mean_error) - 1e-12


def test_section_is_a_markdown_table_with_sources_and_summaries():
    text = nccl_section()
    assert text.startswith("## Collectives against public nccl-tests results")
    assert "| case | system |" in text and "Sources:" in text
    ids = {c.id for c in compare()}
    table = [line for line in text.splitlines() if line.startswith("| ") and line.split("|")[1].strip() in ids]
    assert len(table) == len(ids)
    for title in ("| collective |", "| scale |", "| size (raw points) |", "| kind |"):
        assert title in text
    assert "not** used for fitting" in text and "None of these numbers is used for fitting" in text
    n_sources = len({c.source_url for c in compare()})
    assert f"[{n_sources}] https://" in text
