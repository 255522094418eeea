import itertools
import json

import numpy as np
import pytest

from trainsim.cost.calibration import Calibration
from trainsim.cost.job_costs import default_cost_model
from trainsim.engine import simulate, simulate_job
from trainsim.engine.contention import covered, processor_sharing, union_intervals
from trainsim.engine.stragglers import parse_assignments
from trainsim.errors import TrainsimError
from trainsim.estimate import BREAKDOWN_KEYS
from trainsim.graph.build import Kind
from trainsim.predictor import predict
from trainsim.schedule import SCHEDULES, time_schedule
from trainsim.spec import load_model, load_system
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.training import Training


def job(model="gpt3-7.5b", system="dgx-a100", n=64, **kw):
    par = {k: kw.pop(k) for k in list(kw) if k in Parallelism.model_fields}
    kw.setdefault("global_batch_size", 64)
    return Job(model=load_model(model), system=load_system(system), parallelism=Parallelism(**par),
               training=Training(**kw), num_gpus=n)


# ---- pure pipeline timing: the engine reproduces the schedules' exact makespans ----------------------------------
@pytest.mark.parametrize(("name", "p", "m", "v"), [
    ("1f1b", 4, 8, 1), ("1f1b", 8, 16, 1), ("1f1b", 2, 2, 1), ("gpipe", 4, 8, 1), ("gpipe", 3, 5, 1),
    ("zb-h1", 4, 8, 1), ("zb-h1", 6, 24, 1), ("zb-h1", 4, 3, 1), ("interleaved", 4, 8, 2), ("interleaved", 2, 6, 3),
])
def test_uniform_stages_without_communication_match_the_schedule(name, p, m, v, uniform_costs):
    j = Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"),
            parallelism=Parallelism(pp=p, vpp=v, schedule=name), training=Training(global_batch_size=m), num_gpus=p)
    cm = uniform_costs(f=1e-3, b=1.5e-3, w=0.5e-3)
    tl = simulate(j, cm)
    layers = j.layers_per_stage[0] / v
    if name == "zb-h1":
        f, b, w = layers * 1e-3, layers * 1.5e-3, layers * 0.5e-3
        expected = m * (f + b + w) + (p - 1) * (f + b - w)
    else:
        f, b = layers * 1e-3, layers * 2e-3
        expected = (m * v + p - 1) * (f + b)
    ref = time_schedule(SCHEDULES[name](p, m, v), v, f, b, w if name == "zb-h1" else 0.0).makespan
    assert tl.step_end()[0] == pytest.approx(ref, rel=1e-12)
    if m >= p:  # the published closed forms
        assert ref == pytest.approx(expected, rel=1e-12)
    est, _ = simulate_job(j, cm)
    assert est.breakdown_s["pipeline_bubble"] + est.breakdown_s["compute"] == pytest.approx(ref)


# ---- cross-check with the analytic engine -----------------------------------------------------------------------
def _measurements():
    from trainsim.validation.measurements import load_measurements

    return load_measurements()


@pytest.mark.parametrize("m", _measurements(), ids=lambda m: m.id)
def test_event_and_analytic_agree_on_the_calibration_set(m):
    a = predict(m.job)
    e = predict(m.job, engine="event")
    assert e.engine == "event"
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.10)
    assert sum(e.breakdown_s.values()) == pytest.approx(e.iteration_time_s, rel=1e-9)
    assert set(e.breakdown_s) == set(BREAKDOWN_KEYS) and min(e.breakdown_s.values()) >= 0
    assert e.memory == a.memory and e.mfu > 0


PRESETS = {
    "gpt3-175b-1024-a100": lambda: job("gpt3-175b", "dgx-a100", 1024, tp=8, pp=16, global_batch_size=1536,
                                       recompute_granularity="full", precision="fp16"),
    "llama3-8b-8-h100": lambda: job("llama3-8b", "dgx-h100", 8, global_batch_size=32, zero_stage=1,
                                    recompute_granularity="full"),
    "llama3-70b-cp2-vpp5": lambda: job("llama3-70b", "dgx-h100", 256, tp=8, pp=4, vpp=5, cp=2, sequence_parallel=True,
                                       global_batch_size=128, seq_length=16384, zero_stage=1,
                                       overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True),
    "mixtral-ep8": lambda: job("mixtral-8x7b", "dgx-h100", 64, tp=1, pp=4, ep=8, global_batch_size=256,
                               zero_stage=1, overlap_grad_reduce=True),
    "gpt3-175b-gpipe": lambda: job("gpt3-175b", "dgx-a100", 512, tp=8, pp=8, schedule="gpipe",
                                   global_batch_size=256, recompute_granularity="full"),
    "gpt3-175b-zb-h1": lambda: job("gpt3-175b", "dgx-a100", 512, tp=8, pp=8, schedule="zb-h1",
                                   global_batch_size=256, recompute_granularity="full"),
    "llama2-13b-zero3": lambda: job("llama2-13b", "dgx-h100", 64, global_batch_size=256, zero_stage=3),
    "llama3-405b-16k-h100": lambda: job("llama3-405b", "dgx-h100", 16384, tp=8, pp=16, sequence_parallel=True,
                                        first_stage_layers=7, last_stage_layers=7, global_batch_size=2048,
                                        zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True),
    "gpt3-175b-fp8-nvl72": lambda: job("gpt3-175b", "nvl72-gb200", 576, tp=8, pp=8, sequence_parallel=True,
                                       global_batch_size=288, precision="fp8", zero_stage=1, tp_comm_overlap=True),
    "llama2-70b-interleaved-blocking": lambda: job("llama2-70b", "dgx-h100", 64, tp=8, pp=4, vpp=4,
                                                   global_batch_size=64, overlap_p2p_comm=False),
}


def _hierarchical_cp() -> Job:
    from trainsim.spec.framework import load_framework

    j = job("llama3-70b", "dgx-h100", 128, tp=4, cp=8, hierarchical_cp_sizes=(2, 4), sequence_parallel=True,
            global_batch_size=32, seq_length=65536, zero_stage=1, overlap_grad_reduce=True)
    return j.replace(framework=load_framework("megatron-core").replace(cp_comm_type="a2a+p2p"))


PRESETS["llama3-70b-cp8-a2a+p2p"] = _hierarchical_cp


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_event_and_analytic_agree_on_preset_examples(name):
    j = PRESETS[name]()
    a = predict(j)
    e = predict(j, engine="event")
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.10)
    assert sum(e.breakdown_s.values()) == pytest.approx(e.iteration_time_s, rel=1e-9)


# ---- outputs ----------------------------------------------------------------------------------------------------
def test_extra_fields_and_per_stage_busy_idle():
    j = job(tp=2, pp=4, n=64, global_batch_size=64, zero_stage=1, overlap_grad_reduce=True)
    e = predict(j, engine="event")
    d = e.to_json_dict()
    rows = d["stage_busy_idle"]
    assert [r["stage"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        assert r["busy_s"] + r["idle_s"] == pytest.approx(e.iteration_time_s - e.breakdown_s["other"])
        parts = r["pp_wait_s"] + r["dp_wait_s"] + r["optimizer_wait_s"] + r["bubble_s"]
        assert parts == pytest.approx(r["idle_s"], abs=1e-9)
        assert r["compute_s"] + r["comm_exposed_s"] + r["optimizer_s"] == pytest.approx(r["busy_s"])
    assert d["engine_info"]["replica_classes"] == 1 and d["engine_info"]["symmetric"]
    crit = d["critical_unit"]["stage"]
    assert len(e.stage_busy_s) == 4 and max(e.stage_busy_s) == pytest.approx(rows[crit]["busy_s"])
    assert e.stage_busy_s.index(max(e.stage_busy_s)) == crit
    json.dumps(d, allow_nan=False)


def test_deterministic_bit_for_bit():
    j = job(tp=2, pp=4, n=64, global_batch_size=128, zero_stage=1, overlap_grad_reduce=True)
    kw = dict(slow_rank={5: 1.3}, seq_len_cv=0.3, seed=7, steps=2)
    a = predict(j, engine="event", **kw).to_json_dict()
    b = predict(j, engine="event", **kw).to_json_dict()
    assert json.dumps(a) == json.dumps(b)


# ---- symmetry and stragglers ------------------------------------------------------------------------------------
def test_slow_rank_splits_its_replica_off_and_slows_the_step():
    j = job(tp=2, pp=4, n=64, global_batch_size=64, zero_stage=1, overlap_grad_reduce=True)  # dp 8
    base = simulate(j)
    assert base.classes == 1
    lay = base.layout
    rank = int(lay.rank(tp=1, dp=3, pp=2))
    tl = simulate(j, slow_rank={rank: 1.5})
    assert tl.classes == 2 and (3,) in tl.scenario.classes
    assert tl.step_end()[0] > base.step_end()[0]
    slow_cls = next(c for c, reps in enumerate(tl.scenario.classes) if reps == (3,))
    assert tl.scenario.compute[slow_cls].tolist() == [1.0, 1.0, 1.5, 1.0]
    # the fast replicas wait for the slow one at the data-parallel collectives
    rs = tl.graph.ids(Kind.GRAD_RS)
    assert np.allclose(tl.end[rs, 0], tl.end[rs, 1])
    est, extra = simulate_job(j, slow_rank={rank: 1.5})
    st = extra["stragglers"]
    assert st["slowdown"] > 1 and st["baseline_iteration_time_s"] < est.iteration_time_s
    assert extra["critical_unit"]["dp_replicas"] == [3] and extra["critical_unit"]["stage"] == 2
    # a factor of 1 changes nothing
    same = simulate(j, slow_rank={rank: 1.0})
    assert same.step_end()[0] == pytest.approx(base.step_end()[0], rel=1e-12)


def test_slow_stage_and_slow_link():
    j = job(tp=2, pp=4, n=64, global_batch_size=64, zero_stage=1)
    t0 = simulate(j).step_end()[0]
    t_stage = simulate(j, slow_stage={1: 2.0})
    assert t_stage.classes == 1 and 1.2 * t0 < t_stage.step_end()[0] < 2 * t0
    t_link = simulate(j, slow_link={0: 4.0})
    assert t_link.step_end()[0] > t0
    # node 0 holds stage 0 of replicas 0..3: their pipeline links are slow, the others are not
    assert t_link.classes == 2


def test_seq_len_variation_is_seeded_and_per_replica():
    j = job(tp=2, pp=4, n=64, global_batch_size=64)
    a = simulate(j, seq_len_cv=0.3, seed=1, steps=3)
    b = simulate(j, seq_len_cv=0.3, seed=1, steps=3)
    c = simulate(j, seq_len_cv=0.3, seed=2, steps=3)
    assert a.classes == 8 and a.sim_steps == 3
    assert np.array_equal(a.step_times(), b.step_times())
    assert not np.array_equal(a.step_times(), c.step_times())
    assert len(set(np.round(a.step_times(), 12))) == 3
    ratio = a.scenario.seq
    assert ratio.shape == (3, 8, j.num_microbatches)
    assert abs(ratio.mean() - 1) < 0.1 and 0.15 < ratio.std() < 0.45


def test_straggler_input_errors():
    j = job(tp=2, pp=4, n=64)
    with pytest.raises(TrainsimError, match=r"slow_rank: rank 9999 is outside 0\.\.63"):
        simulate(j, slow_rank=["9999=2"])
    with pytest.raises(TrainsimError, match="slow_stage"):
        simulate(j, slow_stage={4: 2.0})
    with pytest.raises(TrainsimError, match="slow_link"):
        simulate(j, slow_link={8: 2.0})
    with pytest.raises(TrainsimError, match="positive"):
        simulate(j, slow_rank={1: 0.0})
    with pytest.raises(TrainsimError, match="RANK=FACTOR"):
        parse_assignments(["3:2"], "slow_rank", "rank")
    with pytest.raises(TrainsimError, match="seq_len_cv"):
        simulate(j, seq_len_cv=-0.1)
    with pytest.raises(TrainsimError, match="steps"):
        simulate(j, steps=0)
    assert parse_assignments(["3=2", "3=1.5", "4=1"], "slow_rank", "rank") == {3: 3.0, 4: 1.0}


# ---- runtime interactions ---------------------------------------------------------------------------------------
def test_processor_sharing():
    assert processor_sharing(np.array([0.0, 0.0, 0.0]), np.array([1.0, 2.0, 3.0])).tolist() == [3.0, 5.0, 6.0]
    assert processor_sharing(np.array([0.0, 1.0]), np.array([2.0, 2.0])).tolist() == [3.0, 4.0]
    assert processor_sharing(np.array([0.0, 5.0]), np.array([1.0, 1.0])).tolist() == [1.0, 6.0]
    # half the link taken by background traffic during [0, 2)
    done = processor_sharing(np.array([0.0]), np.array([2.0]), np.array([0.0, 2.0]), np.array([0.5, 1.0]))
    assert done.tolist() == [3.0]


def test_interval_helpers():
    grp = np.array([0, 0, 1])
    us, ue = union_intervals(grp, np.array([0.0, 1.0, 0.0]), np.array([2.0, 3.0, 1.0]), 10.0)
    assert us.tolist() == [0.0, 10.0] and ue.tolist() == [3.0, 11.0]
    got = covered(us, ue, np.array([0, 1, 1]), np.array([1.0, 0.5, 2.0]), np.array([5.0, 3.0, 3.0]), 10.0)
    assert got.tolist() == [2.0, 0.5, 0.0]


def test_link_sharing_between_concurrent_transfers():
    # old Megatron interleaved: one batched call sends forward and backward on the same NIC at once
    j = job("gpt3-175b", "dgx-a100", 256, tp=8, pp=8, vpp=2, global_batch_size=64, overlap_p2p_comm=False)
    shared = simulate(j)
    alone = simulate(j, link_sharing=False)
    assert shared.contended_flows > 0 and alone.contended_flows == 0
    assert shared.step_end()[0] > alone.step_end()[0]


def test_overlap_slowdown_slows_compute_under_communication():
    j = job("llama2-7b", "dgx-h100", 32, global_batch_size=128, zero_stage=1, overlap_grad_reduce=True,
            overlap_param_gather=True)
    times = []
    for k in (0.0, 0.5):
        cm = default_cost_model(j, Calibration(overlap_slowdown=k))
        tl = simulate(j, cm)
        times.append(tl.step_end()[0])
        if k:
            assert tl.overlapped_tasks > 0 and tl.overlap.max() > 0
    assert times[1] > times[0]


# ---- memory timeline --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(tp=2, pp=4, global_batch_size=64),
    dict(tp=2, pp=4, global_batch_size=64, recompute_granularity="full"),
    dict(tp=2, pp=4, vpp=2, global_batch_size=64, sequence_parallel=True, model="llama2-7b", system="dgx-h100"),
])
def test_memory_peak_agrees_with_the_analytic_model(kw):
    j = job(n=64, **kw)
    _, extra = simulate_job(j, memory_timeline=True)
    mem = extra["memory_timeline"]
    for s in mem["stages"]:
        assert s["peak_bytes"] == pytest.approx(s["analytic_peak_bytes"], rel=1e-9)
        assert s["static_bytes"] < s["peak_bytes"]


def test_memory_timeline_documented_differences(tmp_path):
    # GPipe keeps every micro-batch's logits until its backward; both models count all of them
    j = job(tp=2, pp=4, n=64, global_batch_size=64, schedule="gpipe")
    _, extra = simulate_job(j, memory_timeline=tmp_path / "mem.json")
    stages = extra["memory_timeline"]["stages"]
    assert all(s["difference_bytes"] == pytest.approx(0, abs=1) for s in stages)
    data = json.loads((tmp_path / "mem.json").read_text())
    series = data["stages"][0]
    assert len(series["t_s"]) == len(series["bytes"]) and max(series["bytes"]) == pytest.approx(stages[0]["peak_bytes"])
    # ZB-H1 keeps the weight-gradient inputs of deferred W passes: the last stage holds more than 1F1B's one
    zb = job(tp=2, pp=4, n=64, global_batch_size=64, schedule="zb-h1")
    _, extra = simulate_job(zb, memory_timeline=tmp_path / "zb.csv")
    assert extra["memory_timeline"]["stages"][-1]["difference_bytes"] > 0
    assert (tmp_path / "zb.csv").read_text().startswith("stage,t_s,bytes")


# ---- Chrome trace -----------------------------------------------------------------------------------------------
def _load_trace(path):
    doc = json.loads(path.read_text())
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    return doc, ev, meta


def _no_overlap(ev):
    by: dict = {}
    for e in ev:
        by.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for slices in by.values():
        slices.sort()
        for (a0, a1), (b0, _b1) in itertools.pairwise(slices):
            assert b0 >= a1 - 1e-3, (a0, a1, b0)


@pytest.mark.parametrize("detail", ["block", "layer"])
def test_chrome_trace(tmp_path, detail):
    j = job(tp=2, pp=4, vpp=3, n=64, global_batch_size=32, zero_stage=1, overlap_grad_reduce=True,
            sequence_parallel=True, tp_comm_overlap=True)
    path = tmp_path / "t.json"
    est, extra = simulate_job(j, trace=path, trace_detail=detail, slow_rank={3: 1.2})
    _, ev, meta = _load_trace(path)
    assert extra["trace"]["detail"] == detail and extra["trace"]["events"] == len(ev)
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in ev)
    threads = {e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert {"compute", "dp comm", "grad sync", "pp fwd send", "pp fwd recv", "pp bwd send", "pp bwd recv"} <= threads
    procs = [e["args"]["name"] for e in meta if e["name"] == "process_name"]
    # the slow rank 3 (TP rank 1 of replica 1) splits its replica off: two classes of 4 stages
    assert len(procs) == 8 and "stage 0 · DP replica 1 · rank 2 (TP×CP group of 2 GPUs)" in procs
    assert "stage 3 · DP replicas 0,2-7 · rank 48 (TP×CP group of 2 GPUs)" in procs
    assert not any("overlap" in t for t in threads)
    _no_overlap(ev)
    comp = [e for e in ev if e["cat"] == "compute"]
    assert all({"stage", "microbatch", "chunk"} <= set(e["args"]) for e in comp)
    sends = [e for e in ev if e["cat"] == "pp comm"]
    assert sends and all(e["args"]["bytes"] > 0 for e in sends)
    if detail == "layer":
        assert {"tp/cp comm"} <= threads and any(e["name"].startswith("qkv") for e in comp)
        assert any(e["cat"] == "tp comm" for e in ev)
    else:
        assert all("layers" in e["args"] for e in comp)
    end_us = max(e["ts"] + e["dur"] for e in ev)
    assert end_us == pytest.approx((est.iteration_time_s - est.breakdown_s["other"]) * 1e6, rel=1e-6)


def test_chrome_trace_of_several_steps_gzipped(tmp_path):
    import gzip

    j = job(tp=2, pp=2, n=16, global_batch_size=16)
    path = tmp_path / "t.json.gz"
    simulate_job(j, trace=path, steps=3, trace_detail="block")
    with gzip.open(path, "rt") as fh:
        doc = json.loads(fh.read())
    steps = {e["args"]["step"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert steps == {0, 1, 2}
    with pytest.raises(TrainsimError, match="trace_detail"):
        simulate_job(j, trace=path, trace_detail="ops")


# ---- op-trace export --------------------------------------------------------------------------------------------
def test_op_trace_export_reads_back_and_the_what_if_blames_the_slow_stage(tmp_path):
    from trainsim.io.traces import COMPUTE_OPTYPES, load_trace

    j = job("llama2-7b", "dgx-h100", 32, tp=2, pp=4, global_batch_size=32, zero_stage=1)
    trace, meta = tmp_path / "trace-SIM.parquet", tmp_path / "meta-SIM.yaml"
    _, extra = simulate_job(j, slow_stage={2: 1.6}, steps=3, export_ops=trace, export_meta=meta)
    df, m = load_trace(trace, meta)
    assert m.trial_name == "SIM" and (m.dp_size, m.pp_size, m.tp_size) == (4, 4, 2)
    assert sorted(df["step"].unique()) == [0, 1, 2] and df["dp_rank"].nunique() == 4
    assert df["rank"].nunique() == 16 and set(df["rank"]) == {int(j) for j in
                                                             [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                                              26, 28, 30]}
    comp = df[df["optype"].isin(COMPUTE_OPTYPES)]
    assert len(comp) == 3 * 4 * 4 * 2 * j.num_microbatches
    mean = comp.groupby("stage")["duration"].mean()
    assert mean[2] == pytest.approx(1.6 * mean[1], rel=0.05)
    assert extra["op_trace"]["rows"] == len(df)
    from trainsim.whatif import analyze_trace

    result = analyze_trace(trace, meta)
    by_stage = result.slowdown_by_stage
    assert max(by_stage, key=lambda s: by_stage[s]) in (2, "2")
    assert result.slowdown > 1.1


def test_op_trace_export_interleaved_and_errors(tmp_path):
    from trainsim.io.traces import load_trace

    j = job("llama2-7b", "dgx-h100", 32, tp=2, pp=4, vpp=2, global_batch_size=32, zero_stage=1,
            overlap_grad_reduce=True, overlap_param_gather=True)
    trace = tmp_path / "trace-V.parquet"
    simulate_job(j, export_ops=trace)
    df, m = load_trace(trace)  # meta beside the trace
    assert m.vpp_size == 2 and set(df["mc"].unique()) >= {0, 1}
    recv = df[(df["optype"] == "forward-recv") & (df["stage"] == 0)]
    fwd = df[(df["optype"] == "forward-compute") & (df["stage"] == 0)]
    assert len(recv) == len(fwd)  # Megatron records the chunk-0 receives too, as no-ops
    assert "separate-grads-all-reduce" in set(df["optype"])
    with pytest.raises(TrainsimError, match="export_ops"):
        simulate_job(job(tp=2, pp=4, n=32, global_batch_size=32, schedule="zb-h1"), export_ops=trace)
    with pytest.raises(TrainsimError, match="export_meta"):
        simulate_job(j, export_meta=tmp_path / "m.yaml")


# ---- measured costs ---------------------------------------------------------------------------------------------
def test_event_engine_uses_measured_operator_tables():
    import pandas as pd

    from trainsim.cost.tables import measured_cost_model, normalize, op_key_columns
    from trainsim.workload.layers import embedding_work, head_work, layer_work, shard_of

    model = load_model("llama3-8b").replace(num_layers=8)
    j = Job(model=model, system=load_system("dgx-h100"), parallelism=Parallelism(tp=2, pp=2),
            training=Training(global_batch_size=16), num_gpus=8)
    shard = shard_of(j)
    analytic = default_cost_model(j)
    seen = {}
    for w in (layer_work(j.model, shard), embedding_work(j.model, shard), head_work(j.model, shard)):
        for op in (*w.fwd, *w.bwd, *w.recompute):
            seen.setdefault(op.key, op)
    # "measured" GEMMs 1.5x slower than the roofline
    rows = [{**op_key_columns(op), "time_s": analytic.compute(op) * (1.5 if op.kind == "gemm" else 1.0),
             "gpu": "h100", "source": "layer"} for op in seen.values()]
    cm = measured_cost_model(j, op_tables=[normalize(pd.DataFrame(rows), "ops")])
    a, e = predict(j, cost_model=cm), predict(j, engine="event", cost_model=cm)
    base = predict(j, engine="event")
    assert e.measured_compute_fraction == pytest.approx(a.measured_compute_fraction)
    assert e.measured_compute_fraction > 0.9
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.10)
    assert e.iteration_time_s > 1.2 * base.iteration_time_s


# ---- where the engines differ on purpose ------------------------------------------------------------------------
def test_recompute_num_layers_recomputes_only_those_layers_in_both_engines():
    """``--recompute-granularity full --recompute-num-layers N``: Megatron recomputes the first N layers of each chunk
    and keeps the others' activations; the event engine and the analytic ``stage_costs`` both price exactly that."""
    import dataclasses

    from trainsim.cost.comm import placements_of
    from trainsim.cost.job_costs import _time_work, stage_costs
    from trainsim.graph.build import build_graph
    from trainsim.workload.layers import layer_work, shard_of

    j = job("gpt3-175b", "dgx-a100", 512, tp=8, pp=8, global_batch_size=256, recompute_granularity="full",
            recompute_num_layers=2)
    cm = default_cost_model(j)
    g = build_graph(j, cm)
    stage1 = g.ids(Kind.BWD)[g.stage[g.ids(Kind.BWD)] == 1][0]  # a stage without embedding or head
    b = g.templates[int(g.tmpl[stage1])]
    shard, places = shard_of(j), placements_of(j)

    def layer_bwd(mode):
        work = layer_work(j.model, dataclasses.replace(shard, recompute=mode), False)
        return _time_work(work, cm, places, False).bwd

    layers = j.layers_per_stage[1]
    expected = 2 * layer_bwd("full") + (layers - 2) * layer_bwd("none")
    assert b.duration == pytest.approx(expected, rel=0.01)
    assert stage_costs(j, cm)[1].body.bwd == pytest.approx(expected, rel=1e-9)
    a, e = predict(j), predict(j, engine="event")
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.05)
    everything = job("gpt3-175b", "dgx-a100", 512, tp=8, pp=8, global_batch_size=256, recompute_granularity="full")
    assert predict(everything).iteration_time_s > 1.1 * a.iteration_time_s
    assert predict(j).hfu < predict(everything).hfu


@pytest.mark.parametrize(("p", "m"), [(8, 1), (8, 3), (8, 7), (4, 3), (8, 8), (8, 16)])
def test_zb_h1_closed_form_matches_the_schedule_for_any_number_of_micro_batches(uniform_costs, p, m):
    """ZB-H1's makespan on uniform stages is 1F1B's minus ``min(m+p-2, 2(p-1))·W``, also with fewer micro-batches
    than stages; the event engine reproduces the schedule exactly and the analytic estimate matches it."""
    from trainsim.estimate import estimate

    j = Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"),
            parallelism=Parallelism(pp=p, schedule="zb-h1"), training=Training(global_batch_size=m), num_gpus=p)
    cm = uniform_costs(f=1e-3, b=1e-3, w=1e-3)
    layers = j.layers_per_stage[0]
    f = b = w = layers * 1e-3
    exact = time_schedule(SCHEDULES["zb-h1"](p, m), 1, f, b, w).makespan
    assert exact == pytest.approx((m + p - 1) * (f + b + w) - min(m + p - 2, 2 * (p - 1)) * w, rel=1e-12)
    assert simulate(j, cm).step_end()[0] == pytest.approx(exact, rel=1e-12)
    assert estimate(j, cm).iteration_time_s == pytest.approx(exact, rel=1e-9)


def test_timeline_frame_and_step_times():
    j = job(tp=2, pp=2, n=16, global_batch_size=16)
    tl = simulate(j, slow_rank={2: 1.4}, steps=2)
    frame = tl.task_frame()
    assert len(frame) == tl.graph.num_tasks * tl.classes
    assert {"kind", "stage", "microbatch", "start_s", "end_s", "cls"} <= set(frame.columns)
    assert (frame["end_s"] >= frame["start_s"]).all() and frame["end_s"].max() == pytest.approx(tl.step_end()[0])
    assert tl.step_times().tolist() == [tl.step_end()[0]] * 2 and tl.sim_steps == 1
    assert tl.replicas_of(tl.class_of_replica()[1]) == (1,)
