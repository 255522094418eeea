import math

import pytest

torch = pytest.importorskip("torch")

from trainsim.cost.tables import OpTimes, measured_cost_model, read_table, write_table  # noqa: E402
from trainsim.errors import TrainsimError  # noqa: E402
from trainsim.predictor import predict  # noqa: E402
from trainsim.profile.runner import job_operators, profile_job, profile_sweep, sweep_operators  # noqa: E402
from trainsim.profile.timing import measure  # noqa: E402
from trainsim.spec.job import Job  # noqa: E402
from trainsim.spec.model import Model  # noqa: E402
from trainsim.spec.system import system_from_dict  # noqa: E402
from trainsim.spec.training import Training  # noqa: E402
from trainsim.workload.ops import gemm  # noqa: E402

FAST = {"warmup": 1, "reps": 2, "min_rep_s": 1e-4, "min_warmup_s": 0.0}

CPU_SYSTEM = system_from_dict({
    "name": "cpu-test",
    "gpu": {"name": "cpu", "generation": "default", "peak_tflops": {"fp32": 0.1, "tf32": 0.1, "fp16": 0.1, "bf16": 0.1},
            "vector_tflops": 0.1, "hbm_bandwidth_tb_s": 0.02, "hbm_capacity_gb": 16, "num_sms": 2},
    "node": {"gpus_per_node": 1, "nvlink_bandwidth_gb_s": 10},
    "network": {"nics_per_node": 1, "nic_bandwidth_gbit_s": 10},
})


def tiny_job(**training):
    model = Model(name="tiny", num_layers=3, hidden_size=64, num_attention_heads=4, vocab_size=256, seq_length=32,
                  make_vocab_size_divisible_by=1)
    return Job(model=model, system=CPU_SYSTEM,
               training=Training(**{"micro_batch_size": 2, "global_batch_size": 2, "precision": "fp32", **training}))


@pytest.fixture(scope="module")
def job_table():
    return profile_job(tiny_job(), "cpu", **FAST)


def test_profile_job_measures_every_distinct_operator_once(job_table):
    job = tiny_job()
    keys = [op.key for op, _ in job_operators(job)]
    layer = job_table[job_table["kind"] != "optimizer"]
    assert len(layer) == len(keys) == len(set(keys))
    assert (layer["time_s"] > 0).all() and (layer["time_min_s"] <= layer["time_s"]).all()
    assert (layer["time_s"] <= layer["time_max_s"]).all() and set(layer["repetitions"]) == {2}
    assert set(layer["device"]) == {"cpu"} and set(layer["gpu"]) == {"cpu"}
    assert set(layer["role"]) == {"fwd", "bwd"} and set(layer["source"]) == {"layer"}
    assert job_table["torch_version"].iloc[0] == torch.__version__
    opt = job_table[job_table["kind"] == "optimizer"]
    assert len(opt) == 1 and opt["params"].iloc[0] == job.model.attention_params + job.model.dense_mlp_params


def test_profiled_table_prices_the_whole_job(job_table, tmp_path):
    path = write_table(job_table, tmp_path / "ops.parquet", "ops")
    job = tiny_job()
    model = measured_cost_model(job, op_tables=[path])
    result = predict(job, cost_model=model)
    assert result.measured_compute_fraction == pytest.approx(1.0)
    by_key = {op.key: model.compute(op) for op, _ in job_operators(job)}
    times = read_table(path, "ops")
    assert sorted(by_key.values()) == pytest.approx(sorted(times[times["kind"] != "optimizer"]["time_s"]))
    opt = times[times["kind"] == "optimizer"].iloc[0]
    from trainsim.workload.memory import stage_parameters

    assert result.breakdown_s["optimizer"] == pytest.approx(stage_parameters(job, 0) * opt.time_s / opt.params)
    other = tiny_job(micro_batch_size=4, global_batch_size=4)  # other shapes: the analytic model takes over
    frac = predict(other, cost_model=measured_cost_model(other, op_tables=[path])).measured_compute_fraction
    assert frac < 0.5


def test_sweep_grid_interpolates_shapes_between_its_points():
    df = profile_sweep("cpu", dtypes=["tf32"], gemm_sizes=[16, 64], layouts=["fwd", "wgrad"],
                       attn_seq_lengths=[16, 64], attn_batch_heads=[2, 4], attn_head_dims=[16],
                       attn_causal=[True], **FAST)
    assert len(df) == 2 * 8 + 2 * 4 and set(df["source"]) == {"sweep"}
    assert set(df["layout"][df["kind"] == "gemm"]) == {"fwd", "wgrad"}
    table = OpTimes.from_frame(df)
    t, how = table.lookup(gemm("mlp_fc1", "fwd", 32, 48, 20, "tf32"))
    assert how == "interpolated" and math.isfinite(t) and t > 0
    assert table.lookup(gemm("mlp_fc1_dgrad", "bwd", 32, 48, 20, "tf32")) is None


def test_sweep_with_a_model_adds_its_layer_at_other_sizes():
    job = tiny_job()
    df = profile_sweep("cpu", dtypes=["tf32"], gemm_sizes=[16], layouts=["fwd"], attn_seq_lengths=[16],
                       attn_batch_heads=[2], attn_head_dims=[16], attn_causal=[True], job=job,
                       seq_lengths=[16, 32], **FAST)
    norms = df[df["name"] == "input_norm"]
    assert sorted(norms["bytes"]) == [2 * 4 * 2 * 16 * 64, 2 * 4 * 2 * 32 * 64]
    table = OpTimes.from_frame(df)
    from trainsim.workload.ops import elementwise

    # the tiny job trains in fp32: its elementwise ops are labelled with the activation dtype
    assert table.lookup(elementwise("input_norm", "fwd", 2 * 4 * 2 * 24 * 64, dtype="fp32"))[1] == "interpolated"
    assert table.lookup(elementwise("input_norm", "fwd", 2 * 4 * 2 * 24 * 64, dtype="bf16")) is None


def test_sweep_operator_grid_and_bad_arguments():
    ops = sweep_operators(["bf16"], [8, 16, 32], ["fwd", "dgrad", "wgrad"], [64], [4], [64], [True, False])
    assert sum(op.kind == "gemm" for op in ops) == 3 * 27 and sum(op.kind == "attention" for op in ops) == 4
    with pytest.raises(TrainsimError, match="layout"):
        sweep_operators(["bf16"], [8], ["nt"])
    with pytest.raises(TrainsimError, match="reps"):
        profile_job(tiny_job(), "cpu", reps=0)
    with pytest.raises(TrainsimError, match="optimizer_dtype"):
        profile_job(tiny_job(), "cpu", optimizer_dtype="fp64", **FAST)
    with pytest.raises(TrainsimError, match="device"):
        profile_job(tiny_job(), "tpu", **FAST)
    if not torch.cuda.is_available():
        with pytest.raises(TrainsimError, match="CUDA is not available"):
            profile_job(tiny_job(), "cuda", **FAST)


def test_measure_repeats_short_operators_inside_a_repetition():
    calls = []
    stats = measure(lambda: calls.append(1), torch.device("cpu"), warmup=2, reps=3, min_rep_s=1e-3,
                    min_warmup_s=0.0)
    assert stats.inner > 1 and stats.repetitions == 3 and stats.warmup == 2
    assert len(calls) == 2 + 1 + 3 * stats.inner
    assert stats.min <= stats.median <= stats.max and stats.std >= 0
