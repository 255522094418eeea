"""The flash kernel library of a stack and its price per GPU generation (trainsim.cost.attention_kernels)."""

from __future__ import annotations

import statistics

import pytest

from trainsim.cost.attention_kernels import (
    BENCHMARK_HIDDEN,
    BENCHMARK_TOKENS,
    FA1_AMPERE_EFFICIENCY,
    FA1_OVER_FA2,
    benchmark_rows,
    fa2_curves,
    fa2_ratio,
    flash_kernel_efficiency,
    flash_kernel_factor,
    sdpa_kernel,
)
from trainsim.cost.calibration import Calibration
from trainsim.cost.compute import op_time
from trainsim.cost.job_costs import default_cost_model
from trainsim.cost.kernel_surfaces import packaged_surface
from trainsim.spec import Job, Training, load_model, load_system
from trainsim.spec.framework import load_framework
from trainsim.workload.ops import attention


def _op(kernel: str, head_dim: int = 128, phase: str = "fwd"):
    return attention("flash_attn", phase, 2, 32, 8192, 8192, head_dim, True, "bf16", 1.0, kernel)  # type: ignore[arg-type]


def test_the_papers_fa2_to_cudnn_ratio_falls_with_the_head_dimension():
    by_dim: dict[int, list[float]] = {}
    for d, _causal, _seq, fa2, cudnn in benchmark_rows():
        by_dim.setdefault(d, []).append(fa2 / cudnn)
    ratios = {d: statistics.median(v) for d, v in by_dim.items()}
    assert sorted(ratios) == [64, 128, 256]
    assert all(0.5 < r < 0.9 for r in ratios.values())
    assert ratios[64] > ratios[128] > ratios[256]


def test_an_fa2_kernel_costs_the_benchmarks_fa2_level_at_the_benchmarks_shapes():
    """FlashAttention-2 is anchored on its own benchmarked throughput, not on the paper's (older) cuDNN: at every
    benchmark shape the surface head dimensions measure, surface throughput x ratio is the benchmark's FA2 figure."""
    surface = packaged_surface()
    assert surface is not None
    checked = 0
    for d, causal, seq, fa2, cudnn in benchmark_rows():
        op = attention("flash_attn", "fwd", BENCHMARK_TOKENS // seq, BENCHMARK_HIDDEN // d, seq, seq, d, causal)
        measured = surface.throughput(op)
        if measured is None:  # a head dimension the surface lacks keeps the paper's own ratio
            assert fa2_ratio(d, seq, causal) == pytest.approx(fa2 / cudnn)
            continue
        assert measured * fa2_ratio(d, seq, causal) == pytest.approx(fa2)
        checked += 1
    assert checked >= 12  # head dimensions 64 and 128 are measured


def test_the_fa2_ratio_interpolates_in_sequence_and_head_dimension_and_clamps_outside():
    curves = fa2_curves()
    assert (128, True) in curves and (64, False) in curves
    assert fa2_ratio(128, 65536, True) == fa2_ratio(128, 16384, True)  # beyond the benchmark: its last point
    assert fa2_ratio(128, 256, True) == fa2_ratio(128, 512, True)
    between = fa2_ratio(128, 3000, True)
    assert min(fa2_ratio(128, 2048, True), fa2_ratio(128, 4096, True)) <= between
    assert between <= max(fa2_ratio(128, 2048, True), fa2_ratio(128, 4096, True))
    assert fa2_ratio(96, 8192, False) == pytest.approx((fa2_ratio(64, 8192, False) + fa2_ratio(128, 8192, False)) / 2)
    assert fa2_ratio(32, 8192, False) == fa2_ratio(64, 8192, False)
    assert set(curves) == {(d, c) for d in (64, 128, 256) for c in (True, False)}  # both masks at every dimension
    assert fa2_ratio(512, 8192, True) == fa2_ratio(256, 8192, True)
    # above 1 only where the surface's short kernels are launch-bound (head dimension 64, causal, 512 tokens)
    launch_bound = curves[(64, True)][0]
    assert 1.0 < launch_bound[1] < 2.0
    assert all(0.4 < y < 1.0 for points in curves.values() for x, y in points if (x, y) != launch_bound)


@pytest.mark.parametrize(("kernel", "generation", "fa2"), [
    ("fa2", "ampere", False), ("cudnn", "ampere", False), ("cudnn-blackwell", "ampere", False),
    ("fa2", "hopper", True), ("fa2", "blackwell", True), ("cudnn", "hopper", False), ("fa3", "hopper", False),
    ("cudnn-blackwell", "hopper", True), ("cudnn-blackwell", "blackwell", False), ("fa2", "default", False),
])
def test_flash_attention_2_is_slower_only_on_parts_with_asynchronous_tensor_cores(kernel, generation, fa2):
    assert flash_kernel_factor(kernel, generation, 128, 8192, True) == (
        pytest.approx(fa2_ratio(128, 8192, True)) if fa2 else 1.0)


def test_pytorch_sdpa_runs_fa1_before_2_2_fa2_then_and_prefers_cudnn_from_2_11():
    assert sdpa_kernel("2.11.0+cu130") == "cudnn" and sdpa_kernel("PyTorch 2.13") == "cudnn"
    assert sdpa_kernel("2.10.1") == "fa2" and sdpa_kernel("torch==2.2.0") == "fa2"
    assert sdpa_kernel("2.1.2") == "fa1" and sdpa_kernel("PyTorch 2.0") == "fa1"  # SDPA's FlashAttention-1 backend
    with pytest.raises(ValueError, match="torch version"):
        sdpa_kernel("nightly")


def test_both_kernel_models_price_the_library():
    calib = Calibration()
    h100, a100 = load_system("dgx-h100").gpu, load_system("dgx-a100").gpu
    for phase in ("fwd", "bwd"):
        fast, slow = op_time(_op("cudnn", phase=phase), h100, calib), op_time(_op("fa2", phase=phase), h100, calib)
        overhead = calib.kernel_overhead_s
        assert (slow - overhead) == pytest.approx((fast - overhead) / fa2_ratio(128, 8192, True), rel=1e-9)
        assert op_time(_op("cudnn", phase=phase), a100, calib) == op_time(_op("fa2", phase=phase), a100, calib)
    job = Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), training=Training(global_batch_size=8),
              num_gpus=8)
    surface = default_cost_model(job, calib)  # the measured (cuDNN) H100 surface
    assert surface.compute(_op("fa2")) == pytest.approx(surface.compute(_op("cudnn")) / fa2_ratio(128, 8192, True),
                                                        rel=1e-9)
    assert surface.compute(_op("fa3")) == surface.compute(_op("cudnn"))


def test_flash_attention_1_takes_twice_fa2s_time_on_hopper_and_its_published_level_on_the_a100():
    """FlashAttention-2's paper: "around 2x faster" than FlashAttention-1, which reaches 25-40 % of an A100's peak."""
    assert FA1_OVER_FA2 == 0.5
    assert pytest.approx((0.25 + 0.40) / 2) == FA1_AMPERE_EFFICIENCY
    assert flash_kernel_factor("fa1", "hopper", 128, 8192, True) == pytest.approx(0.5 * fa2_ratio(128, 8192, True))
    assert flash_kernel_efficiency("fa1", "ampere") == FA1_AMPERE_EFFICIENCY
    assert flash_kernel_efficiency("fa1", "hopper") is None and flash_kernel_efficiency("fa2", "ampere") is None
    calib = Calibration()
    h100, a100 = load_system("dgx-h100").gpu, load_system("dgx-a100").gpu
    overhead = calib.kernel_overhead_s
    for phase in ("fwd", "bwd"):
        fa1, fa2 = op_time(_op("fa1", phase=phase), h100, calib), op_time(_op("fa2", phase=phase), h100, calib)
        assert fa1 - overhead == pytest.approx(2 * (fa2 - overhead), rel=1e-9)
        # on the A100: the published level for both passes and head dimensions (8192 tokens fill the SMs but for
        # the last wave's 0.2 %)
        for head_dim in (64, 128):
            op = _op("fa1", head_dim=head_dim, phase=phase)
            assert op_time(op, a100, calib) - overhead == pytest.approx(
                op.flops / (a100.peak_flops.bf16 * FA1_AMPERE_EFFICIENCY), rel=0.005)
        assert op_time(_op("fa1", phase=phase), a100, calib) > op_time(_op("fa2", phase=phase), a100, calib)


def test_llm_foundry_2023_ran_the_triton_flash_attention_1_kernel():
    assert load_framework("llm-foundry@0.2").flash_kernel == "fa1"
    assert "check_alibi_support" in load_framework("llm-foundry@0.2").sources["flash_kernel"]


@pytest.mark.parametrize(("name", "kernel"), [
    ("megatron-core", "cudnn"), ("nemo", "cudnn"), ("hf-transformers", "fa2"), ("hf-transformers@5", "cudnn"),
    ("fsdp", "fa2"), ("llm-foundry", "fa2"), ("llm-foundry@0.2", "fa1"), ("deepspeed", "fa2"),
    ("megatron-deepspeed", "fa2"),
    ("torchtitan", "cudnn-blackwell"), ("torchtitan@2024", "fa2"), ("meta-llama3", "fa2"),
])
def test_profiles_name_their_flash_kernel_library_with_a_source(name, kernel):
    fw = load_framework(name)
    assert fw.flash_kernel == kernel
    assert fw.sources["flash_kernel"]
