import pytest

import trainsim
from trainsim.spec import Job, Parallelism, Training, load_model, load_system


def make(**tr):
    return Job(model=load_model("llama3-70b"), system=load_system("dgx-h100"),
               parallelism=Parallelism(tp=8, pp=4, vpp=5, sequence_parallel=True),
               training=Training(global_batch_size=128, zero_stage=1, **tr), num_gpus=64)


def test_prediction_fields_and_their_relations():
    p = trainsim.predict(make(train_tokens=1e12))
    d = p.to_json_dict()
    for key in ("iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_flops_per_iteration", "mfu", "hfu",
                "breakdown_s", "memory", "training", "job"):
        assert key in d
    assert p.tokens_per_s == pytest.approx(128 * 8192 / p.iteration_time_s)
    assert p.tokens_per_s_per_gpu == pytest.approx(p.tokens_per_s / 64)
    assert p.mfu == pytest.approx(p.model_flops_per_iteration / (p.iteration_time_s * 64 * 989.4e12))
    assert 0.2 < p.mfu < 0.8
    assert set(d["memory"]["per_stage"][0]) >= {"stage", "weights_bytes", "gradients_bytes", "optimizer_bytes",
                                                 "activations_bytes", "other_bytes", "total_bytes"}
    tr = p.training
    assert tr.days == pytest.approx(1e12 / (128 * 8192) * p.iteration_time_s / 86400)
    assert tr.cost_usd == pytest.approx(tr.gpu_hours * 3.0)


def test_recompute_raises_hfu_above_mfu_and_costs_time():
    a = trainsim.predict(make())
    b = trainsim.predict(make(recompute_granularity="full"))
    assert b.iteration_time_s > a.iteration_time_s
    assert b.hfu > b.mfu and a.hfu == pytest.approx(a.mfu)
    assert b.memory.peak_bytes < a.memory.peak_bytes


def test_prediction_is_deterministic():
    assert trainsim.predict(make()).to_json_dict() == trainsim.predict(make()).to_json_dict()
