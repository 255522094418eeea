from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainsim.errors import TrainsimError
from trainsim.schedule import (
    SCHEDULES,
    Action,
    bubble_fraction,
    from_actions,
    get_schedule,
    gpipe,
    interleaved,
    onef1b,
    orders_for,
    time_schedule,
    zb_h1,
)
from trainsim.schedule.interleaved import schedule_table, warmup_forwards
from trainsim.schedule.onef1b import OneF1B
from trainsim.spec import load_model, load_system
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.training import Training


def text(order):
    return str(order)


# ---- published orders -------------------------------------------------------------------------------------------
def test_1f1b_matches_pipedream_flush_figure():
    # Narayanan et al. SC'21, Figure 4 (top): 4 devices, 8 micro-batches
    o = onef1b(4, 8)
    assert text(o[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert text(o[1]) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"
    assert text(o[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"
    assert text(o[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_gpipe_all_forwards_then_backwards_in_reverse():
    o = gpipe(3, 4)
    assert all(text(s) == "F0 F1 F2 F3 B3 B2 B1 B0" for s in o)


def test_interleaved_matches_megatron_schedule_table_and_warmup():
    # Megatron-Core's table for PP2, M4, VP2: micro-batch groups of p through chunk 0 then chunk 1
    mb, chunk = schedule_table(4, 2, 2)
    assert mb.tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert chunk.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    # SC'21 Figure 4 (bottom): 4 devices, 8 micro-batches, 2 chunks; device 1 warms up with 10 forwards
    o = interleaved(4, 8, 2)
    assert warmup_forwards(4, 0, 8, 2) == 10 and warmup_forwards(4, 3, 8, 2) == 4
    assert text(o[0]) == ("F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 B0.1 F7 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0 "
                          "F7.1 B1 B2 B3 B4.1 B5.1 B6.1 B7.1 B4 B5 B6 B7")
    # the last device warms up with p = 4 forwards, then alternates (its chunk-1 forward feeds its own backward)
    assert text(o[3]) == ("F0 F1 F2 F3 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4 B0 F5 B1 F6 B2 F7 B3 F4.1 B4.1 "
                          "F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4 B5 B6 B7")


def test_zb_h1_matches_reference_implementation():
    # Qi et al. 2024, ZB-H1 (authors' ZeroBubbleH1Pipeline, exact semantics): the last stage defers p-1 W
    o = zb_h1(4, 8)
    assert text(o[0]) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7"
    assert text(o[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7"
    assert text(o[1]) == "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7"


# ---- exact bubble fractions on uniform stages -------------------------------------------------------------------
@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 8), (4, 4), (8, 16), (3, 7), (8, 3), (16, 64)])
@pytest.mark.parametrize("name", ["1f1b", "gpipe"])
def test_bubble_of_1f1b_and_gpipe(name, p, m):
    f, b = 1.0, 2.0
    t = time_schedule(SCHEDULES[name](p, m), 1, f, b)
    assert t.makespan == pytest.approx((m + p - 1) * (f + b))
    assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert bubble_fraction(name, p, m) == pytest.approx(t.bubble_fraction)


@pytest.mark.parametrize(("p", "m", "v"), [(2, 2, 2), (4, 8, 2), (4, 4, 3), (4, 12, 3), (8, 16, 4), (2, 6, 5)])
def test_bubble_of_interleaved(p, m, v):
    f, b = 1.0 / v, 2.0 / v  # a stage's whole model costs (1, 2); each chunk 1/v of it
    t = time_schedule(interleaved(p, m, v), v, f, b)
    assert t.makespan == pytest.approx((m * v + p - 1) * (f + b))
    assert t.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))
    assert bubble_fraction("interleaved", p, m, v) == pytest.approx(t.bubble_fraction)


@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 4), (4, 8), (8, 16), (6, 24)])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8)])
def test_bubble_of_zb_h1(p, m, f, b, w):
    t = time_schedule(zb_h1(p, m), 1, f, b, w)
    # ZB-H1's bubble is (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W)
    assert t.makespan == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - w))
    assert t.bubble_fraction == pytest.approx(bubble_fraction("zb-h1", p, m, 1, f, b, w))
    one = time_schedule(onef1b(p, m), 1, f, b + w)
    assert one.makespan - t.makespan == pytest.approx(2 * (p - 1) * w)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 4), (4, 8), (8, 16)])
def test_p2p_delays_the_critical_path(p, m):
    d = 0.1
    t0 = time_schedule(onef1b(p, m), 1, 1.0, 2.0)
    t1 = time_schedule(onef1b(p, m), 1, 1.0, 2.0, p2p=d)
    # the fill and the drain cross every hand-over once; at most every hand-over of the critical stage counts
    assert t0.makespan + 2 * (p - 1) * d - 1e-9 <= t1.makespan <= t0.makespan + 2 * (m + p - 1) * d + 1e-9
    assert t1.busy == t0.busy


# ---- structure (property based) ---------------------------------------------------------------------------------
def in_flight(order, per_chunk=False):
    live, peak = 0, 0
    for a in order.actions():
        if a.kind == "F":
            live += 1
        elif a.kind == "B":
            peak = max(peak, live)
            live -= 1
    return peak


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 9), m=st.integers(1, 24), name=st.sampled_from(["1f1b", "gpipe", "zb-h1"]))
def test_orders_are_complete_and_run_without_deadlock(p, m, name):
    orders = SCHEDULES[name](p, m)
    kinds = "FBW" if name == "zb-h1" else "FB"
    for s, o in enumerate(orders):
        counts = Counter((a.kind, a.microbatch) for a in o.actions())
        assert counts == Counter({(k, b): 1 for k in kinds for b in range(m)})
        pos = {(a.kind, a.microbatch): i for i, a in enumerate(o.actions())}
        assert all(pos[("F", b)] < pos[("B", b)] for b in range(m))
        if name == "zb-h1":
            assert all(pos[("B", b)] < pos[("W", b)] for b in range(m))
        expected = m if name == "gpipe" else min(p - s, m)
        assert in_flight(o) == expected  # 1F1B and ZB-H1 hold at most p - s micro-batches
    time_schedule(orders, 1, 1.0, 2.0, 0.5)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), groups=st.integers(1, 4), v=st.integers(1, 4))
def test_interleaved_orders_are_complete_and_run(p, groups, v):
    m = p * groups
    orders = interleaved(p, m, v)
    for s, o in enumerate(orders):
        counts = Counter((a.kind, a.microbatch, a.chunk) for a in o.actions())
        assert counts == Counter({(k, b, c): 1 for k in "FB" for b in range(m) for c in range(v)})
        assert in_flight(o) == min(warmup_forwards(p, s, m, v) + 1, m * v)
    time_schedule(orders, v, 1.0, 2.0)


# ---- API --------------------------------------------------------------------------------------------------------
def test_registry_and_errors():
    assert set(SCHEDULES) == {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"}
    assert isinstance(get_schedule("1f1b"), OneF1B)
    assert get_schedule("1f1b")(4, 8) == onef1b(4, 8)
    with pytest.raises(TrainsimError, match=r"parallelism\.schedule"):
        get_schedule("dualpipe")
    with pytest.raises(TrainsimError, match=r"multiple of pp"):
        interleaved(4, 6, 2)
    with pytest.raises(TrainsimError, match="vpp"):
        onef1b(4, 8, 2)
    with pytest.raises(TrainsimError, match="positive"):
        gpipe(0, 4)


def test_actions_round_trip_and_orders_for_job():
    acts = [Action("F", 0), Action("F", 1, 1), Action("B", 1, 1), Action("W", 0)]
    assert from_actions(acts).actions() == acts
    assert str(Action("B", 3, 1)) == "B3.1"
    job = Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"),
              parallelism=Parallelism(pp=4, vpp=2), training=Training(global_batch_size=8), num_gpus=4)
    orders = orders_for(job)
    assert len(orders) == 4 and orders == interleaved(4, 8, 2)
