"""Hugging Face ``config.json`` → :class:`~trainsim.spec.model.Model`.

Understands the field names of Llama, Mistral, Mixtral, Qwen2 (and Qwen2-MoE), GPT-2, GPT-NeoX, GPT-J, BLOOM, Falcon,
OPT and similar decoder-only configs, with their aliases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainsim.errors import TrainsimError
from trainsim.spec.model import Model

# canonical field → aliases in order of preference
_ALIASES: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "num_query_groups": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "n_kv_heads"),
    "kv_channels": ("head_dim", "kv_channels"),
    "ffn_hidden_size": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", "ffn_dim_multiplier_abs"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "seq_length": ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "n_ctx"),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "moe_router_topk": ("num_experts_per_tok", "moe_top_k", "top_k"),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "expert_intermediate_size"),
    "moe_shared_expert_intermediate_size": ("shared_expert_intermediate_size",),
}

_GATED_ACTS = {"silu", "swiglu", "swish", "geglu", "gelu_glu"}
_ROPE_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt_neox", "gptj", "falcon",
               "gemma", "gemma2", "phi3", "deepseek_v2", "deepseek_v3", "olmo", "olmo2", "starcoder2", "internlm2"}
_RMSNORM_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "phi3",
                  "deepseek_v2", "deepseek_v3", "olmo2", "internlm2"}


def _first(cfg: dict[str, Any], field: str) -> Any:
    for key in _ALIASES[field]:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def model_from_hf_config(cfg: dict[str, Any], name: str | None = None) -> Model:
    """Build a :class:`Model` from a parsed Hugging Face ``config.json``."""
    if not isinstance(cfg, dict):
        raise TrainsimError("config.json", "is not a JSON object", "pass a Hugging Face model config.json")
    if "text_config" in cfg and isinstance(cfg["text_config"], dict) and _first(cfg, "num_layers") is None:
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    model_type = str(cfg.get("model_type", "")).lower()
    fields: dict[str, Any] = {}
    for field in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        value = _first(cfg, field)
        if value is None:
            raise TrainsimError(
                f"config.json.{_ALIASES[field][0]}",
                "missing",
                f"the config needs one of {', '.join(_ALIASES[field])}",
            )
        fields[field] = value
    for field in ("num_query_groups", "kv_channels", "ffn_hidden_size", "seq_length", "num_experts",
                  "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size"):
        value = _first(cfg, field)
        if value is not None:
            fields[field] = value
    for ours, keys in (("hidden_dropout", ("hidden_dropout", "resid_pdrop", "hidden_dropout_prob", "dropout")),
                       ("attention_dropout", ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob"))):
        value = next((cfg[k] for k in keys if isinstance(cfg.get(k), int | float)), 0.0)
        fields[ours] = float(value)
    if cfg.get("multi_query") and "num_query_groups" not in fields:  # Falcon-7B style MQA
        fields["num_query_groups"] = 1
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or cfg.get("hidden_activation") or "").lower()
    fields["swiglu"] = act in _GATED_ACTS
    if model_type in {"gpt2", "bloom", "opt", "gpt_neox", "gptj", "falcon"}:
        fields["swiglu"] = False
    if "ffn_hidden_size" not in fields and not fields["swiglu"]:
        fields["ffn_hidden_size"] = 4 * int(fields["hidden_size"])
    if fields.get("moe_ffn_hidden_size") and "ffn_hidden_size" not in fields:
        fields["ffn_hidden_size"] = fields["moe_ffn_hidden_size"]
    rms = model_type in _RMSNORM_TYPES or "rms_norm_eps" in cfg
    fields["normalization"] = "RMSNorm" if rms else "LayerNorm"
    fields["untie_embeddings_and_output_weights"] = not bool(cfg.get("tie_word_embeddings", model_type == "gpt2"))
    if model_type == "bloom" or cfg.get("alibi"):
        fields["position_embedding_type"] = "alibi"
    elif model_type in _ROPE_TYPES or "rope_theta" in cfg or "rotary_dim" in cfg or "rope_scaling" in cfg:
        fields["position_embedding_type"] = "rope"
    else:
        fields["position_embedding_type"] = "learned_absolute"
    bias = cfg.get("attention_bias", cfg.get("use_bias", cfg.get("bias")))
    if bias is None:
        bias = model_type in {"gpt2", "bloom", "opt", "gpt_neox", "gptj", "falcon", "qwen2"} and not rms
    fields["add_bias_linear"] = bool(bias)
    fields["name"] = name or str(cfg.get("_name_or_path") or model_type or "hf-model")
    fields["source"] = "Hugging Face config.json"
    if "seq_length" in fields:
        fields["seq_length"] = int(fields["seq_length"])
    from trainsim.io.hf_moe import moe_fields  # MoE / latent-attention architectures

    return Model(**moe_fields(cfg, model_type, fields))


def load_hf_config(path: str | Path) -> Model:
    """Read a Hugging Face ``config.json`` file (or a directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text())
    except FileNotFoundError:
        raise TrainsimError("model", f"file not found: {p}", "give a preset name or a path to config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrainsimError("model", f"cannot read {p} as JSON ({exc})",
                            "check the file is a valid config.json") from None
    return model_from_hf_config(cfg, name=p.parent.name if p.name == "config.json" else p.stem)
