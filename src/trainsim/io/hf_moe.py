"""Hugging Face ``config.json`` fields of mixture-of-experts and latent-attention architectures.

:func:`trainsim.io.hf.model_from_hf_config` reads the fields every decoder shares and then calls
:func:`moe_fields` for what only these architectures have:

- **DeepSeek-V2/V3, Kimi-K2** (``deepseek_v2``, ``deepseek_v3``, ``kimi_k2``): multi-head latent attention
  (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), routed and shared
  experts (``n_routed_experts``, ``n_shared_experts`` × ``moe_intermediate_size``), ``first_k_dense_replace`` dense
  layers, ``moe_layer_freq``, auxiliary-loss-free routing (``topk_method: noaux_tc``) and multi-token prediction
  (``num_nextn_predict_layers``);
- **Qwen2-MoE / Qwen3-MoE**: ``decoder_sparse_step``, ``mlp_only_layers``, the gated shared expert of Qwen2-MoE and
  the per-head q/k norms of Qwen3;
- **Mixtral**: ``num_local_experts`` experts of ``intermediate_size``, optional ``sliding_window``;
- **DBRX**: ``ffn_config`` (``moe_num_experts``, ``moe_top_k``, GLU experts of ``ffn_hidden_size``) and
  ``attn_config`` (``kv_n_heads``);
- **GPT-OSS**: biased attention and experts, a router bias, attention sinks, and ``layer_types`` alternating
  sliding-window (``sliding_window``) and full attention;
- **Llama 4** (``llama4`` / ``llama4_text``): experts of ``intermediate_size`` plus one shared expert of the same size
  on every MoE layer, dense layers of ``intermediate_size_mlp``, ``interleave_moe_layer_step`` and chunked attention
  (``attention_chunk_size``) on the layers with RoPE (every fourth layer is global, without RoPE).
"""

from __future__ import annotations

from typing import Any

from trainsim.errors import TrainsimError

DEEPSEEK_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm4_moe_lite"}
QWEN_MOE_TYPES = {"qwen2_moe", "qwen3_moe"}
LLAMA4_TYPES = {"llama4", "llama4_text"}
MOE_TYPES = DEEPSEEK_TYPES | QWEN_MOE_TYPES | LLAMA4_TYPES | {"mixtral", "gpt_oss", "dbrx"}


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = cfg.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise TrainsimError(f"config.json.{key}", f"must be a non-negative integer (got {value!r})",
                            "fix the config.json")
    return int(value)


def _regular_pattern(flags: list[bool], key: str) -> tuple[int, int, int]:
    """(first dense layers, frequency, offset) reproducing a per-layer MoE pattern, or a clear error."""
    n = len(flags)
    moe = [i for i, f in enumerate(flags) if f]
    if not moe:
        raise TrainsimError(f"config.json.{key}", "leaves no MoE layer", "check the config")
    first = moe[0]
    for freq in range(1, n + 1):
        offset = first % freq
        if all(f == (i >= first and i % freq == offset) for i, f in enumerate(flags)):
            return first, freq, offset
    raise TrainsimError(f"config.json.{key}", "gives an irregular pattern of MoE layers",
                        "trainsim supports first-k-dense plus every-n-th-layer patterns")


def moe_fields(cfg: dict[str, Any], model_type: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Model fields for the MoE/MLA architectures (``fields`` holds what the generic reader found); other model
    types are returned unchanged."""
    if model_type not in MOE_TYPES:
        return fields
    out = dict(fields)
    layers = int(out["num_layers"])
    if model_type in DEEPSEEK_TYPES:
        _deepseek(cfg, out, layers)
    elif model_type in QWEN_MOE_TYPES:
        _qwen_moe(cfg, model_type, out, layers)
    elif model_type == "mixtral":
        out["ffn_hidden_size"] = _int(cfg, "intermediate_size")
        out["moe_ffn_hidden_size"] = out["ffn_hidden_size"]
        _window(cfg, out)
    elif model_type == "gpt_oss":
        _gpt_oss(cfg, out, layers)
    elif model_type == "dbrx":
        _dbrx(cfg, out)
    else:
        _llama4(cfg, out, layers)
    out["source"] = f"Hugging Face config.json ({model_type})"
    return {k: v for k, v in out.items() if v is not None}


def _deepseek(cfg: dict[str, Any], out: dict[str, Any], layers: int) -> None:
    """DeepSeek-V2/V3/V3.2, Kimi-K2 and GLM-4.5/4.7 (``glm4_moe``, ``glm4_moe_lite``): routed and shared experts after
    ``first_k_dense_replace`` dense layers, MTP; multi-head latent attention where the config has ``kv_lora_rank``,
    else grouped-query attention (GLM-4.5: ``attention_bias`` on Q, K and V only, optional q/k norms)."""
    if cfg.get("kv_lora_rank") is not None or cfg.get("model_type") in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        out["multi_latent_attention"] = True
        out["q_lora_rank"] = _int(cfg, "q_lora_rank")
        out["kv_lora_rank"] = _int(cfg, "kv_lora_rank", 512)
        out["qk_head_dim"] = _int(cfg, "qk_nope_head_dim", 128)
        out["qk_pos_emb_head_dim"] = _int(cfg, "qk_rope_head_dim", 64)
        out["v_head_dim"] = _int(cfg, "v_head_dim", 128)
        out.pop("num_query_groups", None)
        out.pop("kv_channels", None)
        out["add_bias_linear"] = bool(cfg.get("attention_bias", False))
    else:  # Glm4MoeAttention: q/k/v_proj biased by attention_bias, o_proj never
        out["add_qkv_bias"] = bool(cfg.get("attention_bias", False))
        out["add_bias_linear"] = False
        out["qk_layernorm"] = bool(cfg.get("use_qk_norm", False))
    out["swiglu"] = True  # SwiGLU experts and dense MLPs in every one of these families (hidden_act silu)
    if cfg.get("index_topk"):  # DeepSeek-V3.2's DSA: a lightning indexer picks index_topk keys per query
        out["approximations"] = (*out.get("approximations", ()),
                                 f"DeepSeek sparse attention (indexer selecting {cfg['index_topk']} keys per query) "
                                 "modelled as dense MLA attention (overestimates attention time at long sequences)")
    experts = _int(cfg, "n_routed_experts")
    if experts:
        out["num_experts"] = experts
        expert_ffn = _int(cfg, "moe_intermediate_size")
        out["moe_ffn_hidden_size"] = expert_ffn
        shared = _int(cfg, "n_shared_experts") or 0
        out["moe_shared_expert_intermediate_size"] = shared * (expert_ffn or 0) or None
        out["moe_first_k_dense"] = _int(cfg, "first_k_dense_replace", 0)
        out["moe_layer_freq"] = _int(cfg, "moe_layer_freq", 1) or 1
        groups, picked = _int(cfg, "n_group"), _int(cfg, "topk_group")
        if groups and picked and groups > 1 and picked < groups:  # group-limited (device/node-limited) routing
            out["moe_router_num_groups"], out["moe_router_group_topk"] = groups, picked
        if cfg.get("topk_method") == "noaux_tc":  # DeepSeek-V3: bias-based, auxiliary-loss-free balancing
            out["moe_router_enable_expert_bias"] = True
            out["moe_router_load_balancing_type"] = "seq_aux_loss"
        elif cfg.get("seq_aux"):
            out["moe_router_load_balancing_type"] = "seq_aux_loss"
    out["ffn_hidden_size"] = _int(cfg, "intermediate_size")
    out["mtp_num_layers"] = _int(cfg, "num_nextn_predict_layers", 0)
    if experts and (out["moe_first_k_dense"] or 0) >= layers:
        raise TrainsimError("config.json.first_k_dense_replace", f"covers all {layers} layers",
                            "use fewer dense layers than num_hidden_layers")


def _qwen_moe(cfg: dict[str, Any], model_type: str, out: dict[str, Any], layers: int) -> None:
    out["moe_ffn_hidden_size"] = _int(cfg, "moe_intermediate_size")
    out["ffn_hidden_size"] = _int(cfg, "intermediate_size")
    step = _int(cfg, "decoder_sparse_step", 1) or 1
    dense_only = set(cfg.get("mlp_only_layers") or [])
    flags = [i not in dense_only and (i + 1) % step == 0 for i in range(layers)]
    first, freq, offset = _regular_pattern(flags, "mlp_only_layers")
    out.update(moe_first_k_dense=first, moe_layer_freq=freq, moe_layer_offset=offset)
    shared = _int(cfg, "shared_expert_intermediate_size")
    if shared:
        out["moe_shared_expert_intermediate_size"] = shared
        out["moe_shared_expert_gate"] = True  # Qwen2-MoE: sigmoid(h → 1) gate on the shared expert
    if model_type == "qwen3_moe":
        out["qk_layernorm"] = True
        out["add_bias_linear"] = False
    else:  # Qwen2(-MoE): biases on Q, K and V only
        out["add_qkv_bias"] = True
        out["add_bias_linear"] = False
    if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        _window(cfg, out)


def _window(cfg: dict[str, Any], out: dict[str, Any]) -> None:
    window = _int(cfg, "sliding_window")
    if window:
        out["local_attention"] = "sliding"
        out["local_attention_size"] = window


def _dbrx(cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """DBRX: experts and router in ``ffn_config`` (GLU experts of ``ffn_hidden_size``), grouped-query heads in
    ``attn_config``; LayerNorm without biases, RoPE, untied embeddings (transformers' DbrxConfig)."""
    ffn = cfg.get("ffn_config") or {}
    attn = cfg.get("attn_config") or {}
    expert_ffn = _int(ffn, "ffn_hidden_size", 3584)
    out["ffn_hidden_size"] = expert_ffn
    out["moe_ffn_hidden_size"] = expert_ffn
    out["num_experts"] = _int(ffn, "moe_num_experts", 4)
    out["moe_router_topk"] = _int(ffn, "moe_top_k", 1)
    out["num_query_groups"] = _int(attn, "kv_n_heads", 1)
    out["swiglu"] = True  # DbrxExpertGLU: act(x·w1) * (x·v1), then ·w2
    out["normalization"] = "LayerNorm"
    out["add_bias_linear"] = False
    out["position_embedding_type"] = "rope"


def _gpt_oss(cfg: dict[str, Any], out: dict[str, Any], layers: int) -> None:
    expert_ffn = _int(cfg, "intermediate_size")
    out["ffn_hidden_size"] = expert_ffn
    out["moe_ffn_hidden_size"] = expert_ffn
    out["moe_router_topk"] = _int(cfg, "num_experts_per_tok") or _int(cfg, "experts_per_token") or 4
    out["add_bias_linear"] = bool(cfg.get("attention_bias", True))
    out["moe_router_bias"] = True
    out["attention_sinks"] = True
    out["swiglu"] = True
    window = _int(cfg, "sliding_window")
    if window and not layer_type_windows(cfg, out, layers, window):
        # GPT-OSS without layer_types: alternating sliding and full attention
        out.update(local_attention="sliding", local_attention_size=window, local_attention_skip_freq=2)


def layer_type_windows(cfg: dict[str, Any], out: dict[str, Any], layers: int, window: Any) -> bool:
    """Sliding-window attention spelled by ``layer_types`` (GPT-OSS, Gemma 3, OLMo 3, EXAONE 4 ...): ``window`` on
    the ``sliding_attention`` layers, the others global every n-th layer; False when the config spells none."""
    types = cfg.get("layer_types")
    if not (isinstance(types, list) and len(types) == layers and isinstance(window, int) and window > 0
            and "sliding_attention" in types):
        return False
    out.update(local_attention="sliding", local_attention_size=window,
               local_attention_skip_freq=global_every([i for i, t in enumerate(types) if t != "sliding_attention"],
                                                      layers, "layer_types"))
    return True


def global_every(global_layers: list[int], layers: int, key: str) -> int | None:
    """Megatron's ``--window-attn-skip-freq`` for the given global-attention layers (None: no global layer)."""
    if not global_layers:
        return None
    freq = global_layers[0] + 1
    if global_layers != [i for i in range(layers) if (i + 1) % freq == 0]:
        raise TrainsimError(f"config.json.{key}", "gives an irregular pattern of global-attention layers",
                            "trainsim supports every-n-th-layer global attention")
    return freq


def _llama4(cfg: dict[str, Any], out: dict[str, Any], layers: int) -> None:
    expert_ffn = _int(cfg, "intermediate_size")
    out["moe_ffn_hidden_size"] = expert_ffn
    out["moe_shared_expert_intermediate_size"] = expert_ffn  # one shared expert of the routed size
    out["ffn_hidden_size"] = _int(cfg, "intermediate_size_mlp", expert_ffn)
    step = _int(cfg, "interleave_moe_layer_step", 1) or 1
    moe_layers = cfg.get("moe_layers")
    if isinstance(moe_layers, list):
        flags = [i in set(moe_layers) for i in range(layers)]
    else:
        flags = [i % step == step - 1 for i in range(layers)]
    first, freq, offset = _regular_pattern(flags, "moe_layers")
    out.update(moe_first_k_dense=first if first >= freq else 0, moe_layer_freq=freq, moe_layer_offset=offset)
    out["add_bias_linear"] = bool(cfg.get("attention_bias", False))
    chunk = _int(cfg, "attention_chunk_size")
    if chunk:
        out["local_attention"] = "chunked"
        out["local_attention_size"] = chunk
        no_rope = cfg.get("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == layers:  # 0 marks a global (NoPE) layer
            out["local_attention_skip_freq"] = global_every(
                [i for i, use_rope in enumerate(no_rope) if not use_rope], layers, "no_rope_layers")
        else:
            out["local_attention_skip_freq"] = 4  # Llama 4: every fourth layer is global (NoPE)
