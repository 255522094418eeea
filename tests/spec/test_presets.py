import json

import pytest

from trainsim.errors import TrainsimError
from trainsim.spec import list_models, list_systems, load_model, load_system

REQUIRED_MODELS = {"gpt3-1.7b", "gpt3-1t", "gpt3-175b", "mt-nlg-530b", "bloom-176b", "llama2-7b", "llama2-13b",
                   "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "vit-era5"}
REQUIRED_SYSTEMS = {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "nvl72-gb200"}


def test_required_presets_exist_load_and_cite_a_source():
    assert set(list_models()) >= REQUIRED_MODELS
    assert set(list_systems()) >= REQUIRED_SYSTEMS
    for name in list_models():
        assert load_model(name).source
    for name in list_systems():
        s = load_system(name)
        assert s.source and s.price_per_gpu_hour > 0


def test_system_units_are_converted_to_si():
    a100 = load_system("dgx-a100")
    assert a100.gpu.peak_flops.fp16 == pytest.approx(312e12)
    assert a100.node.nvlink_bandwidth == pytest.approx(300e9)
    assert a100.network.nic_bandwidth == pytest.approx(25e9)  # 200 Gb/s
    assert a100.nic_bandwidth_per_gpu() == pytest.approx(25e9)
    assert load_system("nvl72-gb200").gpus_per_node == 72


def test_unknown_preset_suggests_close_names():
    with pytest.raises(TrainsimError) as exc:
        load_model("llama-3-8b")
    assert "llama3-8b" in str(exc.value)
    with pytest.raises(TrainsimError) as exc:
        load_system("dgx-h10")
    assert "dgx-h100" in str(exc.value)


def test_system_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("""
gpu: {name: X, generation: hopper, peak_tflops: {fp32: 60, tf32: 400, fp16: 800, bf16: 800},
      vector_tflops: 60, hbm_bandwidth_tb_s: 3, hbm_capacity_gb: 96, num_sms: 100}
node: {gpus_per_node: 4, nvlink_bandwidth_gb_s: 200}
network: {nics_per_node: 4, nic_bandwidth_gbit_s: 100}
price_per_gpu_hour: 1.5
""")
    s = load_system(str(f))
    assert s.gpus_per_node == 4 and s.price_per_gpu_hour == 1.5 and s.gpu.hbm_capacity == pytest.approx(96e9)
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: {name: X}\nnode: {}\nnetwork: {}\n")
    with pytest.raises(TrainsimError) as exc:
        load_system(str(bad))
    assert exc.value.field.startswith("system.gpu")


def test_own_model_json(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 100}))
    assert load_model(str(f)).num_layers == 4
