"""MoE and new dense presets: loadable, sourced, with the published sizes; the new systems match NVIDIA's specs."""

import pytest

from trainsim.spec import load_model
from trainsim.spec.presets import load_system

# preset → (published total parameters, relative tolerance); sources in each preset's "source" field
TOTALS = {
    "deepseek-v2": (236e9, 0.015), "deepseek-v3": (671e9, 0.002), "kimi-k2": (1.04e12, 0.015),
    "qwen3-30b-a3b": (30.5e9, 0.01), "qwen3-235b-a22b": (235e9, 0.01), "gpt-oss-20b": (20.91e9, 0.002),
    "gpt-oss-120b": (116.83e9, 0.002), "mixtral-8x7b": (46.7e9, 0.01), "mixtral-8x22b": (141e9, 0.01),
    "llama4-scout": (109e9, 0.02), "llama4-maverick": (400e9, 0.01), "grok-1": (314e9, 0.01),
    "nemotron4-340b": (340e9, 0.01), "gpt3-81.2b": (81.2e9, 0.005),
}


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_preset_sizes(name: str) -> None:
    m = load_model(name)
    total, tol = TOTALS[name]
    assert m.source
    assert m.num_params - m.mtp_params == pytest.approx(total, rel=tol)


def test_dense_presets_are_dense() -> None:
    for name in ("nemotron4-340b", "gpt3-81.2b"):
        assert not load_model(name).is_moe


@pytest.mark.parametrize(("name", "gpus", "hbm", "bf16", "fp8", "nvlink"), [
    ("dgx-b300", 8, 288 * 2**30, 2.25e15, 4.5e15, 900e9),
    ("nvl72-gb300", 72, 288 * 2**30, 2.5e15, 5e15, 900e9),
    ("hgx-h200", 8, 141 * 2**30, 989.4e12, 1978.9e12, 450e9),
    ("nvl72-gb200", 72, 186 * 2**30, 2.5e15, 5e15, 900e9),
    ("dgx-b200", 8, 180 * 2**30, 2.25e15, 4.5e15, 900e9),
    ("dgx-h100", 8, 80 * 2**30, 989.4e12, 1978.9e12, 450e9),
    ("grand-teton-h100", 8, 96 * 2**30, 886.5e12, 1773e12, 450e9),  # H100 SXM/NVL peaks interpolated at 500 W
])
def test_system_presets_match_nvidia_specs(name: str, gpus: int, hbm: float, bf16: float, fp8: float,
                                           nvlink: float) -> None:
    s = load_system(name)
    assert s.gpus_per_node == gpus  # the NVLink domain, not the 4-GPU tray of an NVL72 rack
    # datasheet GB of HBM are GiB: the H100's 80 GB shows as 81,559 MiB (shared/data/gpu-h100/nvidia-smi.csv)
    assert s.gpu.hbm_capacity == pytest.approx(hbm, rel=1e-3)
    assert s.gpu.peak_flops.bf16 == pytest.approx(bf16)
    assert s.gpu.peak_flops.fp8 == pytest.approx(fp8)
    assert s.node.nvlink_bandwidth == nvlink
    assert s.source


@pytest.mark.parametrize(("name", "base", "nvlink"), [("hgx-h800", "dgx-h100", 200e9), ("hgx-a800", "dgx-a100", 200e9)])
def test_export_variants_have_their_base_compute_and_less_nvlink(name: str, base: str, nvlink: float) -> None:
    """H800 / A800: the H100 / A100 compute and memory with NVLink cut to 400 GB/s bidirectional."""
    s, b = load_system(name), load_system(base)
    assert s.gpu.peak_flops == b.gpu.peak_flops and s.gpu.hbm_capacity == b.gpu.hbm_capacity
    assert s.gpu.generation == b.gpu.generation and s.node.nvlink_bandwidth == nvlink < b.node.nvlink_bandwidth


def test_volta_dgx2_runs_fp16_without_flash_attention_and_takes_amperes_constants():
    """DGX-2 (V100 SXM3 32GB): FP16 tensor cores only, no flash kernel, Ampere's fitted constants."""
    from trainsim.cost.calibration import calibration_for
    from trainsim.errors import TrainsimError
    from trainsim.spec import Job, Parallelism, Training, load_model, load_system

    system = load_system("dgx2-v100")
    assert system.gpu.generation == "volta" and system.gpu.peak_flops.bf16 is None
    assert system.node.gpus_per_node == 16 and system.gpu.peak_flops.for_dtype("fp16") == 125e12
    assert calibration_for("volta") == calibration_for("ampere")

    def job(precision: str, framework: str, attention: str | None = None) -> Job:
        tp = 1 if framework == "hf-transformers" else 2
        return Job(model=load_model("gpt3-1.7b"), system=system, parallelism=Parallelism(tp=tp),
                   training=Training(global_batch_size=32, precision=precision, attention=attention),
                   num_gpus=16, framework=framework)

    with pytest.raises(TrainsimError, match="BF16 tensor cores"):
        job("bf16", "megatron-lm-2021")
    with pytest.raises(TrainsimError, match="flash attention does not run on V100"):
        job("fp16", "megatron-core")
    assert job("fp16", "megatron-core", attention="unfused").attention_path == "unfused"
    assert job("fp16", "hf-transformers").attention_path == "flash"  # SDPA's memory-efficient kernel
    assert job("fp16", "megatron-lm-2021").attention_path == "unfused"
