import json

import pytest

from trainsim.errors import TrainsimError
from trainsim.spec import load_model

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
}
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
GPT2 = {
    "model_type": "gpt2",
    "n_embd": 1600,
    "n_head": 25,
    "n_layer": 48,
    "n_positions": 1024,
    "vocab_size": 50257,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "attn_pdrop": 0.1,
}
NEOX = {
    "model_type": "gpt_neox",
    "hidden_size": 6144,
    "intermediate_size": 24576,
    "num_attention_heads": 64,
    "num_hidden_layers": 44,
    "vocab_size": 50432,
    "max_position_embeddings": 2048,
    "rotary_pct": 0.25,
    "hidden_act": "gelu_fast",
    "tie_word_embeddings": False,
    "use_parallel_residual": True,
}
QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1e6,
    "tie_word_embeddings": False,
}


def _write(tmp_path, cfg, name="config.json"):
    d = tmp_path / "m"
    d.mkdir()
    (d / name).write_text(json.dumps(cfg))
    return d / name


def test_llama3_config_matches_the_preset(tmp_path):
    m = load_model(str(_write(tmp_path, LLAMA3_8B)))
    preset = load_model("llama3-8b")
    assert m.num_params == preset.num_params
    assert (m.swiglu, m.normalization, m.position_embedding_type, m.add_bias_linear) == (True, "RMSNorm", "rope", False)


def test_mixtral_moe_fields(tmp_path):
    m = load_model(str(_write(tmp_path, MIXTRAL)))
    assert m.num_experts == 8 and m.moe_router_topk == 2 and m.num_params == load_model("mixtral-8x7b").num_params


def test_gpt2_and_neox_aliases(tmp_path):
    g = load_model(str(_write(tmp_path, GPT2)))
    assert (g.num_layers, g.hidden_size, g.ffn_size, g.position_embedding_type) == (48, 1600, 6400, "learned_absolute")
    assert not g.untie_embeddings_and_output_weights and g.hidden_dropout == 0.1
    neox = tmp_path / "neox.json"
    neox.write_text(json.dumps(NEOX))
    n = load_model(str(neox))
    assert n.position_embedding_type == "rope" and not n.swiglu and n.untie_embeddings_and_output_weights


def test_qwen2_has_biases_and_gqa(tmp_path):
    q = load_model(str(_write(tmp_path, QWEN2)))
    assert q.query_groups == 4 and q.normalization == "RMSNorm"


def test_incomplete_or_broken_configs(tmp_path):
    with pytest.raises(TrainsimError) as exc:
        load_model(str(_write(tmp_path, {"model_type": "llama", "hidden_size": 64})))
    assert exc.value.field.startswith("config.json.")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(TrainsimError):
        load_model(str(broken))
    with pytest.raises(TrainsimError):
        load_model(str(tmp_path / "missing.json"))
