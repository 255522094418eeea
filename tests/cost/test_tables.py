import math

import pandas as pd
import pytest

from trainsim.cost.calibration import calibration_for
from trainsim.cost.comm import Placement, collective_time
from trainsim.cost.job_costs import OPTIMIZER_BYTES_PER_PARAM, default_cost_model, stage_costs
from trainsim.cost.tables import (
    CommTimes,
    OpTimes,
    gpu_key,
    load_cost_tables,
    measured_cost_model,
    merge_tables,
    normalize,
    op_key_columns,
    packaged_profiles,
    read_table,
    resolve_tables,
    table_kind,
    write_table,
)
from trainsim.errors import TrainsimError
from trainsim.estimate import estimate
from trainsim.predictor import predict
from trainsim.spec import load_model
from trainsim.spec.framework import load_framework
from trainsim.spec.job import Job
from trainsim.spec.parallelism import Parallelism
from trainsim.spec.presets import load_system
from trainsim.spec.training import Training
from trainsim.workload.layers import embedding_work, head_work, layer_work, shard_of
from trainsim.workload.ops import CommOp, attention, elementwise, gemm


def _job(tp=1, pp=1, num_gpus=None, system="dgx-h100", mbs=1, seq=2048):
    model = load_model("llama3-8b").replace(num_layers=4)
    return Job(model=model, system=load_system(system), parallelism=Parallelism(tp=tp, pp=pp),
               training=Training(micro_batch_size=mbs, global_batch_size=8 * mbs, seq_length=seq),
               num_gpus=num_gpus or tp * pp)


def _ops(job):
    shard = shard_of(job)
    seen = {}
    for w in (layer_work(job.model, shard), embedding_work(job.model, shard), head_work(job.model, shard)):
        for op in (*w.fwd, *w.bwd, *w.recompute):
            seen.setdefault(op.key, op)
    return list(seen.values())


def _table(ops, times, gpu="h100", source="layer"):
    rows = [{**op_key_columns(op), "time_s": t, "gpu": gpu, "source": source} for op, t in zip(ops, times,
                                                                                               strict=True)]
    return normalize(pd.DataFrame(rows), "ops")


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H100 80GB HBM3", "h100"), ("H100-SXM5-80GB", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200", "h200"), ("H200-SXM-141GB", "h200"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA A100-SXM4-40GB", "a100"), ("A100-SXM4-80GB", "a100"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie"), ("B200", "b200"), ("cpu", "cpu"), ("cpu: Intel Xeon", "cpu"),
    ("Some Accelerator X1", "some-accelerator-x1"), ("", ""),
])
def test_gpu_key_matches_driver_names_and_presets(name, key):
    assert gpu_key(name) == key


def test_every_gpu_preset_has_a_model_key():
    for preset in ("dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "nvl72-gb200"):
        assert gpu_key(load_system(preset).gpu.name) in ("a100", "h100", "h200", "b200", "gb200")


def test_parquet_roundtrip_keeps_kind_schema_and_rows(tmp_path):
    job = _job()
    ops = _ops(job)
    df = _table(ops, [1e-4 * (i + 1) for i in range(len(ops))])
    path = write_table(df, tmp_path / "t.parquet", "ops")
    assert table_kind(path) == "ops"
    back = read_table(path, "ops")
    assert list(back.columns[: len(df.columns)]) == list(df.columns)
    assert back["time_s"].tolist() == df["time_s"].tolist()
    with pytest.raises(TrainsimError, match="is an operator table"):
        read_table(path, "comm")


def test_unreadable_or_incomplete_tables_are_user_errors(tmp_path):
    with pytest.raises(TrainsimError, match="does not exist"):
        read_table(tmp_path / "missing.parquet", "ops")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(TrainsimError, match="cannot read"):
        read_table(tmp_path / "junk.parquet", "ops")
    with pytest.raises(TrainsimError, match="lacks column"):
        normalize(pd.DataFrame({"name": ["qkv"], "time_s": [1.0]}), "ops")


def test_merge_later_table_wins_and_gpus_must_agree():
    job = _job()
    ops = _ops(job)[:3]
    a = _table(ops, [1.0, 2.0, 3.0])
    b = _table(ops[:1], [10.0])
    merged = merge_tables([a, b], "ops")
    assert len(merged) == 3
    assert sorted(merged["time_s"]) == [2.0, 3.0, 10.0]
    with pytest.raises(TrainsimError, match="different GPUs"):
        merge_tables([a, _table(ops[:1], [1.0], gpu="a100")], "ops")


def test_exact_tables_price_every_op_and_report_full_measured_fraction():
    # CUDA graphs: no host wait, so doubling every op's GPU time doubles the compute time
    job = _job().replace(framework=load_framework("megatron-core").replace(cuda_graphs=True))
    ops = _ops(job)
    analytic = default_cost_model(job)
    table = _table(ops, [2 * analytic.compute(op) for op in ops])
    model = measured_cost_model(job, op_tables=[table])
    for op in ops:
        assert model.compute(op) == pytest.approx(2 * analytic.compute(op))
        assert model.is_measured(op) and model.how(op) == "exact"
    est = estimate(job, model)
    base = estimate(job, analytic)
    assert est.measured_compute_fraction == pytest.approx(1.0)
    assert est.breakdown_s["compute"] == pytest.approx(2 * base.breakdown_s["compute"], rel=1e-9)


def test_partial_table_falls_back_to_the_analytic_model():
    job = _job()
    ops = _ops(job)
    analytic = default_cost_model(job)
    gemms = [op for op in ops if op.kind == "gemm"]
    model = measured_cost_model(job, op_tables=[_table(gemms, [analytic.compute(op) for op in gemms])])
    other = next(op for op in ops if op.kind == "elementwise")
    assert not model.is_measured(other) and model.compute(other) == analytic.compute(other)
    frac = predict(job, cost_model=model).measured_compute_fraction
    assert 0.5 < frac < 1.0


def test_tables_from_another_gpu_are_refused():
    job = _job()
    ops = _ops(job)[:2]
    with pytest.raises(TrainsimError, match="measured on a100"):
        measured_cost_model(job, op_tables=[_table(ops, [1e-3, 1e-3], gpu="a100")])
    assert measured_cost_model(_job(system="hgx-h200"), op_tables=[_table(ops, [1e-3, 1e-3], gpu="h200")])


def _sweep_gemm_rows(sizes, layout="fwd", dtype="bf16", drop=()):
    name = {"fwd": "sweep_gemm", "dgrad": "sweep_gemm_dgrad", "wgrad": "sweep_gemm_wgrad"}[layout]
    ops, times = [], []
    for m in sizes:
        for n in sizes:
            for k in sizes:
                if (m, n, k) in drop:
                    continue
                op = gemm(name, "fwd" if layout == "fwd" else "bwd", m, n, k, dtype)
                thr = 1e12 * (m * n * k) ** 0.1  # log-throughput linear in log m, log n, log k
                ops.append(op)
                times.append(op.flops / thr)
    return ops, times


def test_gemm_interpolation_in_log_throughput_is_exact_for_power_laws_and_stays_inside_the_grid():
    ops, times = _sweep_gemm_rows([512, 1024, 2048, 4096])
    table = OpTimes.from_frame(_table(ops, times, source="sweep"))
    op = gemm("mlp_fc1", "fwd", 1536, 3000, 700, "bf16")
    t, how = table.lookup(op)
    assert how == "interpolated"
    assert t == pytest.approx(op.flops / (1e12 * (1536 * 3000 * 700) ** 0.1), rel=1e-9)
    batched = gemm("attn_qk", "fwd", 512, 1024, 1024, "bf16", batch=4)  # rows: batch * m = 2048
    assert table.lookup(batched)[0] == pytest.approx(batched.flops / (1e12 * (2048 * 1024 * 1024) ** 0.1))
    assert table.lookup(gemm("lm_head", "fwd", 1024, 65536, 1024, "bf16")) is None  # outside the grid
    assert table.lookup(gemm("mlp_fc1_dgrad", "bwd", 1024, 1024, 1024, "bf16")) is None  # no dgrad grid
    assert table.lookup(gemm("mlp_fc1", "fwd", 1024, 1024, 1024, "fp16")) is None  # other dtype


def test_gemm_interpolation_needs_all_surrounding_points():
    ops, times = _sweep_gemm_rows([512, 1024, 2048], drop={(1024, 1024, 2048)})
    table = OpTimes.from_frame(_table(ops, times, source="sweep"))
    assert table.lookup(gemm("x", "fwd", 700, 700, 1500, "bf16")) is None  # corner (1024, 1024, 2048) missing
    assert table.lookup(gemm("x", "fwd", 700, 700, 700, "bf16")) is not None


def test_attention_and_elementwise_interpolation():
    rows, times = [], []
    for bh in (8, 32):
        for s in (1024, 4096):
            op = attention("sweep_attn", "fwd", 1, bh, s, s, 128, True)
            rows.append(op)
            times.append(op.flops / (1e14 * s ** 0.2))
    names = [elementwise("input_norm", "fwd", b) for b in (1e6, 4e6)]
    table = OpTimes.from_frame(pd.concat([_table(rows, times, source="sweep"),
                                          _table(names, [1e-5, 3e-5], source="layer")]))
    op = attention("flash_attn", "fwd", 2, 8, 2048, 2048, 128, True)
    t, how = table.lookup(op)
    assert how == "interpolated" and t == pytest.approx(op.flops / (1e14 * 2048 ** 0.2), rel=1e-9)
    assert table.lookup(attention("flash_attn", "fwd", 2, 8, 512, 2048, 128, True)) is None  # CP: not self-attn
    assert table.lookup(attention("flash_attn", "bwd", 2, 8, 2048, 2048, 128, True)) is None  # no bwd sweep
    t, how = table.lookup(elementwise("input_norm", "fwd", 2e6))
    assert how == "interpolated" and t == pytest.approx(math.exp((math.log(1e-5) + math.log(3e-5)) / 2))
    assert table.lookup(elementwise("input_norm", "fwd", 8e6)) is None


def _comm_table(collective, ranks, nodes, sizes, times, in_place=False, gpu="h100"):
    return normalize(pd.DataFrame({"collective": collective, "nbytes": sizes, "ranks": ranks, "nodes": nodes,
                                   "time_s": times, "in_place": in_place, "gpu": gpu}), "comm")


def test_collective_lookup_interpolates_extrapolates_bandwidth_and_falls_back_below_range():
    t = CommTimes.from_frame(_comm_table("all_reduce", 8, 1, [1 << 20, 1 << 22], [20e-6, 40e-6]))
    place = Placement(8, 8, 1)
    op = CommOp("x", "all_reduce", "tp", "fwd", 1 << 21)
    assert t.lookup(op, place) == pytest.approx(math.sqrt(20e-6 * 40e-6))
    big = CommOp("x", "all_reduce", "tp", "fwd", 1 << 24)
    assert t.lookup(big, place) == pytest.approx(40e-6 * 4)
    assert t.lookup(CommOp("x", "all_reduce", "tp", "fwd", 1 << 10), place) is None
    assert t.lookup(op, Placement(16, 8, 2)) is None
    assert t.lookup(CommOp("x", "all_gather", "tp", "fwd", 1 << 21), place) is None
    assert t.lookup(op, Placement(1, 1, 1)) is None


def test_out_of_place_times_are_preferred_and_send_recv_matches_its_tier():
    both = pd.concat([_comm_table("all_gather", 8, 1, [1 << 20, 1 << 21], [10e-6, 20e-6]),
                      _comm_table("all_gather", 8, 1, [1 << 20, 1 << 21], [30e-6, 60e-6], in_place=True)])
    t = CommTimes.from_frame(both)
    assert t.lookup(CommOp("x", "all_gather", "tp", "fwd", 1 << 20), Placement(8, 8, 1)) == pytest.approx(10e-6)
    p2p = CommTimes.from_frame(pd.concat([_comm_table("send_recv", 2, 2, [1 << 20, 1 << 24], [30e-6, 400e-6]),
                                          _comm_table("send_recv", 8, 1, [1 << 20, 1 << 24], [8e-6, 50e-6])]))
    op = CommOp("pp_p2p", "send_recv", "pp", "fwd", 1 << 20)
    assert p2p.lookup(op, Placement(4, 1, 4)) == pytest.approx(30e-6)  # inter-node pipeline group
    assert p2p.lookup(op, Placement(4, 4, 1)) == pytest.approx(8e-6)  # intra-node


def test_comm_tables_feed_predict_and_the_measured_comm_fraction():
    job = _job(tp=8)
    base = default_cost_model(job)
    place = Placement(8, 8, 1)
    sizes = [1 << s for s in range(10, 34)]
    frames = [_comm_table(c, 8, 1, sizes, [1.5 * collective_time(c, s, place, job.system, base.calibration)
                                           for s in sizes]) for c in ("all_gather", "reduce_scatter", "all_reduce")]
    model = measured_cost_model(job, comm_tables=frames)
    est = estimate(job, model)
    ref = estimate(job, base)
    assert est.measured_comm_fraction == pytest.approx(1.0)
    comm = stage_costs(job, model)[0].total.comm
    assert comm == pytest.approx(1.5 * stage_costs(job, base)[0].total.comm, rel=0.02)
    assert est.breakdown_s["tp_comm"] > ref.breakdown_s["tp_comm"]
    assert est.measured_compute_fraction == 0.0
    anon = _comm_table("all_reduce", 8, 1, sizes, [1e-5] * len(sizes), gpu="")
    assert measured_cost_model(_job(tp=8, system="dgx-a100"), comm_tables=[anon])  # unnamed device: any GPU
    with pytest.raises(TrainsimError, match="comm_costs"):
        measured_cost_model(_job(tp=8, system="dgx-a100"), comm_tables=frames)


def test_measured_optimizer_step_sets_the_optimizer_time_per_parameter():
    job = _job()
    row = {"name": "optimizer_step", "phase": "step", "kind": "optimizer", "dtype": "fp32", "params": 1_000_000,
           "time_s": 2e-3, "gpu": "h100"}
    model = measured_cost_model(job, op_tables=[normalize(pd.DataFrame([row]), "ops")])
    from trainsim.workload.memory import stage_parameters

    stage = stage_costs(job, model)[0]
    assert stage.optimizer == pytest.approx(stage_parameters(job, 0) * 2e-9)
    assert model.optimizer_step(1e6) == pytest.approx(2e-3)
    # the constants of the analytic fallback are untouched
    assert model.calibration == model.fallback.calibration == calibration_for("hopper")
    analytic = default_cost_model(job)
    assert analytic.optimizer_step(1e6) == pytest.approx(1e6 * OPTIMIZER_BYTES_PER_PARAM / (
        job.system.gpu.hbm_bandwidth * analytic.calibration.memory_efficiency))


def test_tables_by_folder_and_loaded_once_for_many_jobs(tmp_path):
    job = _job()
    ops = _ops(job)
    analytic = default_cost_model(job)
    write_table(_table(ops, [analytic.compute(op) for op in ops]), tmp_path / "ops.parquet", "ops")
    write_table(_comm_table("all_reduce", 8, 1, [1 << 20, 1 << 30], [2e-5, 4e-3]), tmp_path / "ar.parquet", "comm")
    assert resolve_tables([tmp_path], "ops") == [tmp_path / "ops.parquet"]
    assert resolve_tables([tmp_path], "comm") == [tmp_path / "ar.parquet"]
    tables = load_cost_tables([tmp_path], [tmp_path])
    for other in (job, _job(tp=8)):
        model = tables.model_for(other)
        assert model.ops is tables.ops and model.comm is tables.comm
    assert predict(job, cost_model=tables.model_for(job)).measured_compute_fraction == pytest.approx(1.0)
    (tmp_path / "sub").mkdir()
    with pytest.raises(TrainsimError, match="no comm table"):
        resolve_tables([tmp_path / "sub"], "comm")
    with pytest.raises(TrainsimError, match="does not exist"):
        measured_cost_model(job, op_tables=["no-such-profile"])
    assert isinstance(packaged_profiles(), list)
