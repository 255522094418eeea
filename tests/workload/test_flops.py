import pytest

from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload.flops import iteration_flops


def _job(model, recompute="none", gbs=512, seq=2048):
    return Job(model=load_model(model), system=load_system("dgx-a100"), parallelism=Parallelism(tp=8, pp=8),
               training=Training(global_batch_size=gbs, seq_length=seq, recompute_granularity=recompute),
               num_gpus=64)


def test_hardware_flops_with_full_recompute_equal_sc21_eq3():
    job = _job("gpt3-175b", "full")
    B, s, L, h = 512, 2048, 96, 12288
    V = job.model.padded_vocab_size()
    eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert iteration_flops(job).hardware == pytest.approx(eq3, rel=1e-9)


def test_model_flops_equal_megatrons_formula_with_gqa_and_swiglu():
    job = _job("llama3-70b", seq=8192, gbs=64)
    m = job.model
    B, s, L, h = 64, 8192, m.num_layers, m.hidden_size
    a, g, f, V = m.num_attention_heads, m.query_groups, m.ffn_size, m.padded_vocab_size()
    megatron = 12 * B * s * L * h**2 * ((1 + g / a + s / h) + f / h * 1.5 + V / (2 * L * h))
    got = iteration_flops(job)
    assert got.model == pytest.approx(megatron, rel=1e-9)
    assert got.hardware == got.model
    assert iteration_flops(job, "causal").model < got.model


def test_moe_counts_only_active_experts():
    job = Job(model=load_model("mixtral-8x7b"), system=load_system("dgx-h100"),
              parallelism=Parallelism(tp=2, ep=4, sequence_parallel=True),
              training=Training(global_batch_size=8), num_gpus=8)
    per_token = iteration_flops(job).model / (8 * 4096)
    assert per_token == pytest.approx(6 * job.model.num_active_params, rel=0.15)
