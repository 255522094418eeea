import pytest

from trainsim.cost.calibration import Calibration
from trainsim.cost.compute import gemm_shape_efficiency, op_time
from trainsim.spec import load_system
from trainsim.workload.ops import attention, elementwise, gemm

GPU = load_system("dgx-h100").gpu
CAL = Calibration(kernel_overhead_s=0.0)


def test_large_gemm_runs_at_the_calibrated_efficiency():
    op = gemm("x", "fwd", 8192, 8192, 8192, "bf16")
    t = op_time(op, GPU, CAL)
    # within the residual wave quantization of 16 waves of tiles
    assert op.flops / t == pytest.approx(GPU.peak_flops.bf16 * CAL.gemm_efficiency, rel=0.04)
    assert op.flops / t <= GPU.peak_flops.bf16 * CAL.gemm_efficiency


def test_wave_and_tile_quantization_cost_throughput():
    sms = GPU.num_sms
    full = gemm_shape_efficiency(1, 256 * 12, 128 * 11, 4096, sms)  # 132 tiles: one full wave
    extra = gemm_shape_efficiency(1, 256 * 12 + 1, 128 * 11, 4096, sms)  # one row more: a nearly empty wave
    assert full == pytest.approx(1.0, abs=1e-9)
    assert extra < 0.95 * full
    assert gemm_shape_efficiency(1, 4096, 4096, 32, sms) < gemm_shape_efficiency(1, 4096, 4096, 4096, sms)


def test_small_gemms_and_elementwise_ops_are_memory_bound():
    skinny = gemm("x", "fwd", 8192, 8, 8192, "bf16")
    t = op_time(skinny, GPU, CAL)
    assert t == pytest.approx(skinny.bytes / (GPU.hbm_bandwidth * CAL.memory_efficiency))
    ew = elementwise("norm", "fwd", 1e9)
    assert op_time(ew, GPU, CAL) == pytest.approx(1e9 / (GPU.hbm_bandwidth * CAL.memory_efficiency))


def test_fp8_is_faster_than_bf16_and_backward_attention_slower_than_forward():
    big = (16384, 16384, 16384)
    assert op_time(gemm("x", "fwd", *big, "fp8"), GPU, CAL) < op_time(gemm("x", "fwd", *big, "bf16"), GPU, CAL)
    f = attention("a", "fwd", 1, 32, 8192, 8192, 128, True)
    b = attention("a", "bwd", 1, 32, 8192, 8192, 128, True)
    assert op_time(b, GPU, CAL) > 2.5 * op_time(f, GPU, CAL)
