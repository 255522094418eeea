"""Measured H100 GEMM/attention surfaces: default on Hopper, exact on the measured shapes, scaled on other parts."""

from __future__ import annotations

import pandas as pd
import pytest

from trainsim.cost.calibration import Calibration
from trainsim.cost.job_costs import AnalyticCostModel, default_cost_model
from trainsim.cost.kernel_surfaces import SurfaceCostModel, packaged_surface
from trainsim.spec import Job, Training, load_model, load_system
from trainsim.workload.ops import attention, gemm


def job(system: str) -> Job:
    return Job(model=load_model("llama3-8b"), system=load_system(system), training=Training(global_batch_size=8),
               num_gpus=8)


def test_hopper_uses_the_surface_and_ampere_stays_analytic():
    assert isinstance(default_cost_model(job("dgx-h100")), SurfaceCostModel)
    assert isinstance(default_cost_model(job("hgx-h200")), SurfaceCostModel)
    a100 = default_cost_model(job("dgx-a100"))
    assert type(a100) is AnalyticCostModel
    assert type(default_cost_model(job("dgx-h100"), kernels="analytic")) is AnalyticCostModel


def test_a_measured_grid_point_takes_the_measured_time_on_h100():
    table = pd.read_parquet(packaged_surface_path())
    row = table[(table.kind == "gemm") & (table.layout == "fwd") & (table.dtype == "bf16") & (table.m == 4096)
                & (table.n == 4096) & (table.k == 4096)].iloc[0]
    model = default_cost_model(job("dgx-h100"), Calibration())
    op = gemm("qkv", "fwd", 4096, 4096, 4096, "bf16")
    assert model.compute(op) == pytest.approx(float(row.time_s), rel=1e-6)
    assert model.is_measured(op)
    # H200: the H100 shape efficiency at the H200's own peak (same tensor peak: same time), not "measured"
    h200 = default_cost_model(job("hgx-h200"), Calibration())
    assert h200.compute(op) == pytest.approx(float(row.time_s), rel=1e-6) and not h200.is_measured(op)


def test_large_shapes_saturate_and_small_ones_fall_back():
    model = default_cost_model(job("dgx-h100"), Calibration())
    big = gemm("lm_head", "fwd", 8192, 128256, 4096, "bf16")  # n beyond the grid: efficiency of the largest n
    edge = gemm("lm_head", "fwd", 8192, 16384, 4096, "bf16")
    assert big.flops / model.compute(big) == pytest.approx(edge.flops / model.compute(edge), rel=1e-6)
    small = gemm("router", "fwd", 4096, 8, 4096, "bf16")
    assert model.compute(small) == pytest.approx(AnalyticCostModel.compute(model, small))
    attn = attention("flash_attn", "fwd", 1, 32, 4096, 4096, 128, True, "bf16")
    assert packaged_surface() is not None and packaged_surface().throughput(attn) is not None


def test_the_end_to_end_scale_is_the_only_knob_on_measured_kernels():
    op = gemm("qkv", "fwd", 4096, 4096, 4096, "bf16")
    base = default_cost_model(job("dgx-h100"), Calibration()).compute(op)
    slow = default_cost_model(job("dgx-h100"), Calibration(measured_kernel_scale=0.5)).compute(op)
    assert slow == pytest.approx(2 * base)


def packaged_surface_path() -> str:
    from importlib import resources

    from trainsim.cost.kernel_surfaces import TABLE

    return str(resources.files("trainsim").joinpath(*TABLE))


def test_blackwell_takes_the_measured_large_kernel_efficiencies_times_hoppers_scales():
    from trainsim.cost.calibration import calibration_for
    from trainsim.cost.kernel_surfaces import large_kernel_efficiencies

    eff = large_kernel_efficiencies()
    assert eff is not None
    hopper, blackwell = calibration_for("hopper"), calibration_for("blackwell")
    assert blackwell.gemm_efficiency == pytest.approx(eff["gemm_efficiency"] * hopper.measured_kernel_scale)
    assert blackwell.fp8_gemm_efficiency == pytest.approx(eff["fp8_gemm_efficiency"]
                                                          * hopper.measured_fp8_kernel_scale)
    assert blackwell.attention_efficiency == pytest.approx(eff["attention_efficiency"]
                                                           * hopper.measured_kernel_scale)
    # measured, not the priors: large H100 GEMMs reach 65-75 % of peak (16-bit), FP8 a smaller share
    assert 0.65 < eff["gemm_efficiency"] < 0.75 and eff["fp8_gemm_efficiency"] < eff["gemm_efficiency"]
    assert blackwell.gemm_efficiency != Calibration().gemm_efficiency
    # everything else is Hopper's fit
    assert blackwell.network_efficiency == hopper.network_efficiency
    assert blackwell.iteration_overhead_s == hopper.iteration_overhead_s


def test_a_b200_is_not_faster_than_its_peak_ratio_over_an_h100_on_a_compute_bound_job():
    from trainsim import predict

    kw = dict(tp=4, pp=4, vpp=5, cp=2, num_gpus=64, seq_length=8192, global_batch_size=128,
              micro_batch_size=1, sequence_parallel=True, use_distributed_optimizer=True, framework="nemo")
    h100 = predict("llama3-70b", "dgx-h100", **kw).iteration_time_s
    b200 = predict("llama3-70b", "dgx-b200", **kw).iteration_time_s
    peak = load_system("dgx-b200").gpu.peak_flops.bf16 / load_system("dgx-h100").gpu.peak_flops.bf16
    assert 1.5 < h100 / b200 < peak
