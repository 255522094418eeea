"""A materialised causal mask (transformers under torch.compile): full-square attention at the masked kernels'
measured throughput (trainsim/data/gpu-h100/sdpa_mask.csv)."""

from __future__ import annotations

import pytest

from trainsim.predictor import predict
from trainsim.spec import Job, Training, load_framework, load_model, load_system
from trainsim.workload import fusion as fz
from trainsim.workload.layers import layer_work, shard_of


def job(framework: str, compiled: bool) -> Job:
    fw = load_framework(framework).replace(torch_compile=compiled)
    return Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"),
               training=Training(global_batch_size=4, micro_batch_size=1, seq_length=4096), num_gpus=1, framework=fw)


def test_masked_efficiency_is_the_measured_median_ratio():
    eff = fz.masked_attention_efficiency()
    assert 0.5 < eff < 0.7  # six measured shapes: 0.54-0.66 of the unmasked kernel


def test_only_a_compiled_stack_that_materialises_the_mask_runs_masked_attention():
    assert fz.fusion_of(job("hf-transformers", True)).masked_attention
    assert not fz.fusion_of(job("hf-transformers", False)).masked_attention
    assert not fz.fusion_of(job("torchtitan", True)).masked_attention  # SDPA with is_causal=True
    assert not fz.fusion_of(job("llm-foundry", True)).masked_attention  # flash-attn's causal flag


def test_masked_attention_computes_every_block_at_lower_throughput():
    j_eager, j_comp = job("hf-transformers", False), job("hf-transformers", True)
    eager = {op.name: op for op in layer_work(j_eager.model, shard_of(j_eager)).fwd}
    comp = {op.name: op for op in layer_work(j_comp.model, shard_of(j_comp)).fwd}
    plain, masked = eager["flash_attn"], comp["flash_attn_masked"]
    assert masked.flops == pytest.approx(2 * plain.flops)  # no causal block skipping
    assert masked.efficiency == pytest.approx(fz.masked_attention_efficiency()) and plain.efficiency == 1.0
    assert masked.attn is not None and masked.attn[-1] is False
    # on the H100 surface the compiled step's attention costs about 3x the eager one (2x blocks / 0.57 throughput;
    # the compiled Llama trace: 61.5 vs 20.6 ms), though its elementwise chains are fused
    from trainsim.cost.job_costs import default_cost_model

    model = default_cost_model(j_comp)
    ratio = model.compute(masked) / model.compute(plain)
    assert 2.5 < ratio < 4.0
    assert predict(j_comp).iteration_time_s < 1.5 * predict(j_eager).iteration_time_s


def test_efficiency_scales_the_kernel_time_on_both_cost_paths():
    from trainsim.cost.calibration import calibration_for
    from trainsim.cost.compute import op_time
    from trainsim.cost.job_costs import default_cost_model
    from trainsim.workload.ops import attention

    gpu = load_system("dgx-a100").gpu  # analytic roofline
    full = attention("a", "fwd", 2, 32, 8192, 8192, 128, False)
    slow = attention("a", "fwd", 2, 32, 8192, 8192, 128, False, efficiency=0.5)
    calib = calibration_for("ampere")
    assert op_time(slow, gpu, calib) > 1.9 * op_time(full, gpu, calib)
    surface = default_cost_model(job("hf-transformers", True))  # the H100 kernel surface
    assert surface.compute(slow) == pytest.approx(2 * surface.compute(full), rel=1e-6)
