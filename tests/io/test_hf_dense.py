"""Real Hugging Face configs of dense decoders: published parameter counts, no silent omissions (issue 15, item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run
from trainsim.errors import TrainsimError
from trainsim.io.hf import ARCHITECTURES, DEFAULT_SEQ_LENGTH, REFUSED, load_hf_config, model_from_hf_config

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"

# file → published parameter count (tests/data/hf/SOURCES.md)
PUBLISHED = {
    "gemma-2-2b.json": 2_614_341_888,
    "gemma-2-9b.json": 9_241_705_984,
    "gemma-2-27b.json": 27_227_128_320,
    "phi-3-small-8k.json": 7_392_272_384,
    "falcon-7b.json": 6_921_720_704,
    "bloom.json": 176_247_271_424,
    "bloom-560m.json": 559_214_592,
    "gpt-neox-20b.json": 20_554_568_208,
    "gpt-j-6b.json": 6_053_381_344,
    "qwen2-7b.json": 7_615_616_512,
    "yi-34b.json": 34_388_917_248,
    "llama-3.1-8b.json": 8_030_261_248,
    "llama-3.1-70b.json": 70_553_706_496,
    "llama-3.2-1b.json": 1_235_814_400,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_the_published_one(name):
    m = load_hf_config(DATA / name)
    # 0.05 %: the norms and biases trainsim does not count (each listed in m.approximations) are below that
    assert m.num_params == pytest.approx(PUBLISHED[name], rel=5e-4)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_training_sequence_length_is_a_stated_default(name):
    m = load_hf_config(DATA / name)
    assert m.seq_length <= max(DEFAULT_SEQ_LENGTH, 2048)
    assert any(a.startswith("seq_length:") for a in m.approximations)


def test_llama31_context_is_not_the_training_length(capsys):
    code, out, err = run(["predict", "-m", str(DATA / "llama-3.1-8b.json"), "-n", "8", "--gbs", "64",
                          "--use-distributed-optimizer", "--json"], capsys)
    assert code == 0, err
    import json

    d = json.loads(out)
    assert d["job"]["seq_length"] == DEFAULT_SEQ_LENGTH  # not 131072
    assert any("131,072" in a and "--seq-length" in a for a in d["approximations"])
    code, out, _ = run(["predict", "-m", str(DATA / "llama-3.1-8b.json"), "-n", "8", "--gbs", "64",
                        "--seq-length", "8192", "--json"], capsys)
    d = json.loads(out)
    assert d["job"]["seq_length"] == 8192 and not any(a.startswith("seq_length") for a in d["approximations"])


def test_approximations_are_printed(capsys):
    code, out, _ = run(["predict", "-m", str(DATA / "gemma-2-9b.json"), "-n", "8", "--gbs", "64",
                        "--seq-length", "4096", "--use-distributed-optimizer"], capsys)
    assert code == 0
    assert "note: attn_logit_softcapping" in out


def test_gemma2_structure():
    m = load_hf_config(DATA / "gemma-2-9b.json")
    assert m.swiglu and not m.untie_embeddings_and_output_weights and m.head_dim == 256
    assert m.local_attention == "sliding" and m.local_attention_size == 4096 and m.local_attention_skip_freq == 2
    assert any("softcapping" in a for a in m.approximations)


def test_gemma3_multimodal_config_reads_its_language_model():
    """Gemma 3's config nests the LM in text_config, leaves vocab_size to the library default and has one global
    layer in six; the vision tower is named as not modelled."""
    m = load_hf_config(DATA / "gemma-3-27b.json")
    assert (m.num_layers, m.hidden_size, m.query_groups, m.head_dim, m.vocab_size) == (62, 5376, 16, 128, 262208)
    assert m.swiglu and not m.untie_embeddings_and_output_weights
    assert m.local_attention == "sliding" and m.local_attention_size == 1024 and m.local_attention_skip_freq == 6
    assert any("vision_config ignored" in a for a in m.approximations)
    assert m.num_params == pytest.approx(27.0e9, rel=0.02)  # 27.4B model card, less the 0.4B SigLIP encoder


def test_gemma3_layer_types_give_the_global_layers():
    cfg = {"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
           "sliding_window": 512, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]
           + ["sliding_attention"] * 3 + ["full_attention"]}
    m = model_from_hf_config(cfg)
    assert m.local_attention_skip_freq == 4 and m.vocab_size == 262208


def test_mpt_attn_config_alibi_and_expansion_ratio():
    m = load_hf_config(DATA / "mpt-7b.json")
    assert m.position_embedding_type == "alibi" and m.ffn_size == 4 * 4096 and not m.add_bias_linear
    assert m.num_params == pytest.approx(6.7e9, rel=0.01)  # MPT-7B model card: 6.7B


@pytest.mark.parametrize(("name", "params", "tol"), [
    ("glm-4-9b.json", 9.4e9, 0.01),  # model card: 9.4B (chatglm remote-code config)
    ("glm-4-9b-hf.json", 9.4e9, 0.01),  # the same model's transformers config
    ("c4ai-command-r.json", 35e9, 0.01),  # model card: 35B (tied embeddings)
    ("phi-2.json", 2.78e9, 0.01),  # transformers' parameter count of microsoft/phi-2 (model card: 2.7B)
])
def test_more_dense_families_match_their_model_cards(name, params, tol):
    m = load_hf_config(DATA / name)
    assert m.num_params == pytest.approx(params, rel=tol)
    assert not any("no trainsim reader" in a for a in m.approximations)


def test_transformers_v5_rope_parameters_and_unknown_types_are_rotary():
    """Devstral 2 (transformers v5) keeps RoPE in rope_parameters only: rotary, no learned position table."""
    m = load_hf_config(DATA / "devstral-2-123b.json")
    assert m.position_embedding_type == "rope" and m.num_params == pytest.approx(125e9, rel=0.02)  # card: 123B
    cfg = {"model_type": "brand_new", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, "max_position_embeddings": 4096}
    assert model_from_hf_config(cfg).position_embedding_type == "rope"
    assert model_from_hf_config({**cfg, "n_positions": 1024}).position_embedding_type == "learned_absolute"


def test_hybrid_layer_types_are_refused():
    """Qwen3.5's Gated DeltaNet layers appear only in layer_types: refused, not modelled as attention."""
    with pytest.raises(TrainsimError, match="hybrid linear-attention"):
        load_hf_config(DATA / "qwen3.5-27b.json")
    cfg = {"model_type": "brand_new", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, "layer_types": ["conv", "full_attention"]}
    with pytest.raises(TrainsimError, match="conv layers"):
        model_from_hf_config(cfg)


def test_layer_types_sliding_windows_and_wrapped_language_models():
    """OLMo 3's layer_types put a 4096-token window on 3 layers of 4; InternVL keeps its LM under llm_config."""
    olmo = load_hf_config(DATA / "olmo-3.1-32b-instruct.json")
    assert (olmo.local_attention, olmo.local_attention_size, olmo.local_attention_skip_freq) == ("sliding", 4096, 4)
    internvl = load_hf_config(DATA / "internvl3-38b-awq.json")
    assert internvl.num_layers == 64 and internvl.add_qkv_bias  # Qwen2.5-32B inside
    assert any("vision_config ignored" in a for a in internvl.approximations)


def test_a_generation_top_k_is_not_the_router_top_k():
    cfg = {"model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128, "top_k": 50}
    assert not model_from_hf_config(cfg).is_moe and model_from_hf_config(cfg).moe_router_topk != 50


def test_glm_has_biases_on_qkv_only_and_a_gated_mlp():
    for name in ("glm-4-9b.json", "glm-4-9b-hf.json"):
        m = load_hf_config(DATA / name)
        assert m.swiglu and m.normalization == "RMSNorm" and m.add_qkv_bias and not m.add_bias_linear
        assert m.query_groups == 2


def test_phi3_small_and_falcon_and_bloom():
    phi = load_hf_config(DATA / "phi-3-small-8k.json")
    assert phi.ffn_size == 14336 and phi.swiglu and phi.query_groups == 8
    assert any("block-sparse" in a for a in phi.approximations)
    falcon = load_hf_config(DATA / "falcon-7b.json")
    assert falcon.query_groups == 1 and not falcon.untie_embeddings_and_output_weights
    bloom = load_hf_config(DATA / "bloom.json")  # n_embed: failed to load before
    assert bloom.hidden_size == 14336 and bloom.position_embedding_type == "alibi"


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_unmodelled_architectures_are_refused(model_type):
    cfg = {"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100}
    with pytest.raises(TrainsimError, match="does not model"):
        model_from_hf_config(cfg)


@pytest.mark.parametrize("key", ["hybrid_override_pattern", "ssm_state_size", "mamba_d_state"])
def test_unknown_model_type_with_state_space_layers_is_refused(key):
    """A hybrid not in REFUSED (a new model_type) is recognised by its state-space config keys."""
    cfg = {"model_type": "brand_new_hybrid", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, key: 16}
    with pytest.raises(TrainsimError, match="state-space"):
        model_from_hf_config(cfg)


def test_unknown_model_type_is_read_with_a_note():
    cfg = {"model_type": "brand_new", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128, "rope_theta": 1e4, "hidden_act": "silu"}
    m = model_from_hf_config(cfg)
    assert any("no trainsim reader" in a for a in m.approximations)


@pytest.mark.parametrize("bad", [{"hidden_size": "big"}, {"num_hidden_layers": -3}, {"hidden_size": 64.5}])
def test_bad_config_values_are_one_error(bad):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, **bad}
    with pytest.raises(TrainsimError, match=r"config\.json"):
        model_from_hf_config(cfg)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_transformers_autoconfig_gives_the_same_model(name):
    pytest.importorskip("transformers")
    plain = load_hf_config(DATA / name)
    if name.startswith("phi-3-small"):  # remote code: transformers has no Phi3SmallConfig, the JSON is read
        assert load_hf_config(DATA / name, via="auto") == plain
        return
    via = load_hf_config(DATA / name, via="transformers")
    assert via.num_params == plain.num_params and via.seq_length == plain.seq_length


def test_registry_has_one_entry_per_dense_family():
    for t in ("llama", "gemma2", "phi3small", "falcon", "bloom", "gpt_neox", "gptj", "qwen2"):
        assert t in ARCHITECTURES


def test_nemotron_relu2_is_a_squared_relu_mlp():
    cfg = {"model_type": "nemotron", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 256, "hidden_act": "relu2",
           "rope_theta": 1e4}
    m = model_from_hf_config(cfg)
    assert not m.swiglu and m.activation == "squared_relu" and m.mlp_activation == "squared_relu"
