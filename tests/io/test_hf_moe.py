"""HF config.json import of MoE / MLA architectures, checked against the published parameter counts."""

from pathlib import Path

import pytest

from trainsim.errors import TrainsimError
from trainsim.io.hf import load_hf_config, model_from_hf_config

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"

# (file, published total, published active, active counts the input embedding?, relative tolerance)
# Sources: tests/data/hf/SOURCES.md. Totals exclude DeepSeek-V3's MTP module (as its report does).
PUBLISHED = [
    ("deepseek-v3.json", 671e9, 37e9, False, 0.015),
    ("deepseek-v2.json", 236e9, 21e9, False, 0.015),
    ("kimi-k2.json", 1.04e12, 32e9, False, 0.015),
    ("qwen3-30b-a3b.json", 30.5e9, 3.3e9, True, 0.015),
    ("qwen3-235b-a22b.json", 235e9, 22e9, True, 0.015),
    ("qwen1.5-moe-a2.7b.json", 14.3e9, 2.7e9, True, 0.015),
    ("mixtral-8x7b.json", 46.7e9, 12.9e9, True, 0.01),
    ("mixtral-8x22b.json", 141e9, 39e9, True, 0.01),
    ("gpt-oss-20b.json", 20.91e9, 3.61e9, False, 0.002),
    ("gpt-oss-120b.json", 116.83e9, 5.13e9, False, 0.002),
    ("llama4-maverick.json", 400e9, 17e9, True, 0.015),
    ("dbrx.json", 132e9, 36e9, True, 0.01),
    ("deepseek-v3.2-exp.json", 671e9, 37e9, False, 0.015),  # V3's shape plus the DSA indexer (noted)
]


@pytest.mark.parametrize(("name", "total", "active", "with_embedding", "tol"), PUBLISHED)
def test_parameter_counts_match_model_cards(name: str, total: float, active: float, with_embedding: bool,
                                            tol: float) -> None:
    m = load_hf_config(DATA / name)
    assert m.num_params - m.mtp_params == pytest.approx(total, rel=tol)
    act = m.num_active_params - (0 if with_embedding else m.embedding_params)
    assert act == pytest.approx(active, rel=max(tol, 0.03))


def test_deepseek_v3_exact_structure() -> None:
    m = load_hf_config(DATA / "deepseek-v3.json")
    assert m.multi_latent_attention and m.q_lora_rank == 1536 and m.kv_lora_rank == 512
    assert m.head_dim == 192 and m.v_dim == 128
    assert m.num_moe_layers == 58 and not any(m.moe_layer_flags[:3])
    assert m.moe_shared_expert_intermediate_size == 2048 and m.moe_router_enable_expert_bias
    assert m.mtp_num_layers == 1
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)  # node-limited routing: n_group, topk_group
    # the report: 671B main model; the MTP module adds 11.5B unique parameters (embedding and head shared)
    assert m.mtp_params == pytest.approx(11.5e9, rel=0.02)
    assert m.num_params - m.mtp_params == pytest.approx(671.03e9, rel=1e-3)


def test_gpt_oss_exact_total() -> None:
    m = load_hf_config(DATA / "gpt-oss-120b.json")
    # OpenAI model card: 116.83B total; every bias, the sinks and the router bias are counted
    assert m.num_params == pytest.approx(116_829_156_672, abs=1)
    assert m.local_attention == "sliding" and m.local_attention_size == 128 and m.local_attention_skip_freq == 2
    assert m.local_attention_layers == 18 and m.attention_sinks and m.moe_router_bias


def test_llama4_interleaving_and_chunked_attention() -> None:
    scout = load_hf_config(DATA / "llama4-scout.json")
    maverick = load_hf_config(DATA / "llama4-maverick.json")
    assert scout.num_moe_layers == 48 and scout.local_attention == "chunked"
    assert scout.local_attention_layers == 36  # every fourth layer global (NoPE)
    assert maverick.num_moe_layers == 24 and maverick.moe_layer_flags[:4] == (False, True, False, True)
    assert maverick.ffn_size == 16384 and maverick.expert_ffn_size == 8192
    # Scout's 109B includes the vision encoder; the text model is ~107.8B
    assert scout.num_params == pytest.approx(107.8e9, rel=0.005)


def test_qwen_patterns() -> None:
    q3 = load_hf_config(DATA / "qwen3-30b-a3b.json")
    assert q3.qk_layernorm and q3.num_moe_layers == 48 and q3.head_dim == 128
    q2 = load_hf_config(DATA / "qwen1.5-moe-a2.7b.json")
    assert q2.moe_shared_expert_gate and q2.add_qkv_bias and not q2.add_bias_linear
    cfg = {"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
           "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
           "intermediate_size": 128, "decoder_sparse_step": 2, "hidden_act": "silu"}
    m = model_from_hf_config(cfg)
    assert m.moe_layer_flags == (False, True, False, True, False, True)
    irregular = {**cfg, "decoder_sparse_step": 1, "mlp_only_layers": [2]}
    with pytest.raises(TrainsimError, match="mlp_only_layers"):
        model_from_hf_config(irregular)


def test_deepseek_preset_equals_hf_import() -> None:
    from trainsim.spec import load_model

    preset = load_model("deepseek-v3")
    imported = load_hf_config(DATA / "deepseek-v3.json")
    assert preset.num_params == imported.num_params
    assert preset.num_active_params == imported.num_active_params
    assert (preset.moe_router_num_groups, preset.moe_router_group_topk) == (8, 4)


def test_dbrx_reads_its_nested_ffn_and_attention_configs() -> None:
    """DBRX keeps experts and GQA heads in ffn_config / attn_config: read, not a dense 4h model."""
    m = load_hf_config(DATA / "dbrx.json")
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.query_groups) == (16, 4, 10752, 8)
    assert m.swiglu and m.normalization == "LayerNorm" and not m.add_bias_linear


def test_deepseek_v32_and_glm_moe_use_the_deepseek_reader() -> None:
    """deepseek_v32 is DeepSeek-V3 plus a sparse-attention indexer (named in a note); glm4_moe_lite is MLA with a
    head count that does not divide the hidden size (MLA's head dims are explicit)."""
    v32 = load_hf_config(DATA / "deepseek-v3.2-exp.json")
    assert v32.multi_latent_attention and v32.moe_first_k_dense == 3 and v32.moe_shared_expert_intermediate_size
    assert any("sparse attention" in a for a in v32.approximations)
    flash = load_hf_config(DATA / "glm-4.7-flash-trimmed.json")  # the trimmed config has no hidden_act
    assert flash.multi_latent_attention and flash.swiglu and flash.num_attention_heads == 20
    assert flash.num_params == pytest.approx(30e9, rel=0.02)  # model card: 30B total ("30B-A3B")
