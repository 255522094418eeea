"""Memory model against hand-derived Megatron numbers (Korthikanti et al. 2022; Megatron's distributed-optimizer
table)."""

import pytest

from trainsim.spec import Job, Model, Parallelism, Training, load_model, load_system
from trainsim.workload.layers import Shard
from trainsim.workload.memory import (
    CUDA_CONTEXT_BYTES,
    bytes_per_param,
    in_flight_microbatches,
    layer_activation_bytes,
    stage_memory,
    stage_parameters,
)

GPT = Model(num_layers=96, hidden_size=12288, num_attention_heads=96, vocab_size=51200, seq_length=2048)
S, B, H, A = 2048, 1, 12288, 96


def _layer(tp: int, cp: int, sp: bool, recompute: str, attention: str) -> float:
    shard = Shard(micro_batch=B, seq=S, tp=tp, cp=cp, sequence_parallel=sp, recompute=recompute, attention=attention)
    return layer_activation_bytes(GPT, shard)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_no_parallel_tricks_matches_sbh_10_plus_24_over_t_plus_5as_over_ht(t):
    got = _layer(t, 1, False, "none", "unfused")
    assert got == pytest.approx(S * B * H * (10 + 24 / t + 5 * A * S / (H * t)))


def test_sequence_parallel_divides_everything_by_t():
    t = 8
    got = _layer(t, 1, True, "none", "unfused")
    assert got == pytest.approx(S * B * H / t * (34 + 5 * A * S / H))


def test_selective_recompute_drops_the_attention_scores():
    t = 8
    got = _layer(t, 1, True, "selective", "unfused")
    assert got == pytest.approx(34 * S * B * H / t)


def test_full_recompute_keeps_the_layer_input_only():
    assert _layer(8, 1, False, "full", "unfused") == pytest.approx(2 * S * B * H)
    assert _layer(8, 1, True, "full", "unfused") == pytest.approx(2 * S * B * H / 8)


def test_flash_attention_stores_no_scores_and_context_parallel_splits_the_sequence():
    flash = _layer(8, 1, True, "none", "flash")
    assert flash == pytest.approx(34 * S * B * H / 8 + 4 * B * (A / 8) * S)
    cp2 = _layer(8, 2, True, "none", "flash")
    assert cp2 == pytest.approx(flash / 2)


def test_bytes_per_parameter_follow_megatrons_distributed_optimizer_table():
    assert sum(bytes_per_param("bf16", 0, 64)) == 18  # 2 + 4 + 12
    assert sum(bytes_per_param("bf16", 1, 8)) == pytest.approx(6 + 12 / 8)
    assert sum(bytes_per_param("fp16", 0, 8)) == 20
    assert sum(bytes_per_param("fp16", 1, 8)) == pytest.approx(4 + 16 / 8)
    assert sum(bytes_per_param("fp32", 1, 4)) == pytest.approx(8 + 8 / 4)
    assert sum(bytes_per_param("bf16", 2, 8)) == pytest.approx(2 + 16 / 8)
    assert sum(bytes_per_param("bf16", 3, 8)) == pytest.approx(18 / 8)


def test_in_flight_microbatches_per_schedule():
    assert [in_flight_microbatches("1f1b", i, 4, 8) for i in range(4)] == [4, 3, 2, 1]
    assert in_flight_microbatches("1f1b", 0, 8, 2) == 2
    assert in_flight_microbatches("gpipe", 3, 4, 8) == 8
    # Megatron interleaved warm-up (p - i - 1)*2 + (v - 1)*p, plus the chunk in flight, in stage units
    assert in_flight_microbatches("interleaved", 0, 4, 8, 2) == pytest.approx(((4 - 1) * 2 + 4 + 1) / 2)


def test_whole_stage_for_gpt3_175b_on_tp8_pp8_by_hand():
    job = Job(model=load_model("gpt3-175b"), system=load_system("dgx-a100"),
              parallelism=Parallelism(tp=8, pp=8, sequence_parallel=True),
              training=Training(global_batch_size=64, recompute_granularity="selective", attention="unfused",
                                precision="bf16"), num_gpus=64)
    st = stage_memory(job, 1)  # a middle stage: 12 layers, no embedding
    m = job.model
    layer = m.attention_params + m.dense_mlp_params
    norms = 2 * 2 * H  # two LayerNorms (weight + bias) are replicated across TP ranks
    params = 12 * ((layer - norms) / 8 + norms)
    assert stage_parameters(job, 1) == pytest.approx(params)
    assert st.weights_bytes == pytest.approx(2 * params)
    assert st.gradients_bytes == pytest.approx(4 * params)
    assert st.optimizer_bytes == pytest.approx(12 * params)
    per_layer = 34 * S * B * H / 8
    assert st.activations_bytes == pytest.approx(12 * per_layer * (8 - 1))  # 1F1B: stage 1 holds p - 1 micro-batches
    assert st.other_bytes > CUDA_CONTEXT_BYTES
    first = stage_memory(job, 0)
    assert first.weights_bytes > st.weights_bytes  # embedding


@pytest.mark.parametrize(("recipe", "copy"), [("mxfp8", 1 + 1 / 32), ("blockwise", 1 + 4 / 128),
                                               ("nvfp4", 0.5 + 1 / 16), ("delayed", 1.0)])
def test_fp8_saved_linear_inputs_keep_only_the_column_wise_copy(recipe, copy):
    """Transformer Engine drops a quantized input's row-wise data once the forward GEMM has used it (the
    weight-gradient GEMM reads the column-wise copy), so each saved GEMM input costs one copy, and a layer keeps
    less than in BF16 by exactly the saved inputs' bytes."""
    def shard(precision: str, fp8_recipe: str | None = None) -> Shard:
        return Shard(micro_batch=B, seq=S, tp=8, sequence_parallel=True, recompute="none", attention="flash",
                     precision=precision, fp8_recipe=fp8_recipe)

    fp8 = shard("fp8", recipe)
    assert fp8.saved_input_bytes == pytest.approx(copy)
    # GPT's saved GEMM inputs per token: QKV and FC1 (h / tp each, sequence parallel), projection (h / tp),
    # FC2 (4h / tp)
    saved_elements = S * B * (H / 8 + H / 8 + H / 8 + 4 * H / 8)
    bf16, low = layer_activation_bytes(GPT, shard("bf16")), layer_activation_bytes(GPT, fp8)
    assert bf16 - low == pytest.approx(saved_elements * (2 - copy))
