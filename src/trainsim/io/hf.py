"""Hugging Face ``config.json`` → :class:`~trainsim.spec.model.Model`.

Each ``model_type`` trainsim understands has an :class:`Architecture` in :data:`ARCHITECTURES` (dense decoders here;
mixture-of-experts and latent-attention types are refined by :mod:`trainsim.io.hf_moe`, called through one hook).
An architecture states the library's defaults for what a config may leave out (tied embeddings, biases, gated MLP,
normalization, positions) and, where needed, a ``refine`` function for fields only that family has (Gemma-2's
sliding window and soft-capping, Gemma 3's local/global layers, MPT's ``attn_config``, Phi-3-small's block-sparse
attention, Falcon's multi-query attention...). A multimodal config is read through its ``text_config``: only the
language model is modelled, and the note says so.

Two rules keep the answers honest:

- **The training sequence length never comes from the config.** ``max_position_embeddings`` is the context the
  model supports (131072 for Llama 3.1), not what it is trained with. A config-loaded model gets
  :data:`DEFAULT_SEQ_LENGTH` (or its context, when shorter), and the prediction says so unless ``--seq-length`` is
  given.
- **No silent omissions.** A feature trainsim does not model either is refused (:data:`REFUSED`) or is
  approximated and recorded in :attr:`Model.approximations <trainsim.spec.model.Model.approximations>`, which
  ``trainsim predict`` prints and writes to ``--json`` as ``approximations``.

With the optional ``hf`` extra (``pip install 'trainsim[hf]'``), :func:`load_hf_config` can read configs through
``transformers.AutoConfig`` first (``via="transformers"``), so that the library's own defaults fill in absent keys;
the default reader needs nothing but the JSON file.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainsim.errors import TrainsimError
from trainsim.spec.model import SEQ_LENGTH_NOTE, Model

#: Training sequence length of a config-loaded model when ``--seq-length`` is not given (capped at its context).
DEFAULT_SEQ_LENGTH = 4096

# canonical field → aliases in order of preference
_ALIASES: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model", "dim"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "num_query_groups": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "n_kv_heads"),
    "kv_channels": ("head_dim", "kv_channels"),
    "ffn_hidden_size": ("intermediate_size", "ff_intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_positions": ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "n_ctx"),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "moe_router_topk": ("num_experts_per_tok", "moe_top_k"),  # not "top_k": a generation default in full dumps
    "moe_ffn_hidden_size": ("moe_intermediate_size", "expert_intermediate_size"),
    "moe_shared_expert_intermediate_size": ("shared_expert_intermediate_size",),
}

_GATED_ACTS = {"silu", "swiglu", "swish", "geglu", "gelu_glu", "gegelu"}
#: Squared-ReLU activations of non-gated MLPs (Nemotron's HF config: ``hidden_act: relu2``).
_SQUARED_RELU_ACTS = {"relu2", "squared_relu", "relu_squared"}

Refiner = Callable[[dict[str, Any], dict[str, Any], list[str]], None]


@dataclass(frozen=True)
class Architecture:
    """How one Hugging Face ``model_type`` maps onto :class:`Model` (defaults for absent keys, plus extras)."""

    positions: Literal["rope", "alibi", "learned_absolute"] = "rope"
    norm: Literal["RMSNorm", "LayerNorm"] = "RMSNorm"
    gated_mlp: bool | None = None  # None: from the activation name
    bias: bool = False  # add_bias_linear when the config has no attention_bias/bias key
    tied: bool = False  # tie_word_embeddings when the config has no such key
    context: int | None = None  # max_position_embeddings when the config has no such key (the library's default)
    vocab: int | None = None  # vocab_size when the config has no such key (the library's default)
    refine: Refiner | None = None
    notes: tuple[str, ...] = field(default=())


def _note_parallel(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str], always: bool = False) -> None:
    """The note for parallel attention/MLP blocks: the config says so, or the family always has them."""
    if cfg.get("use_parallel_residual") or cfg.get("parallel_attn") or always:
        notes.append("parallel attention and MLP blocks (one residual) modelled as sequential blocks: same FLOPs and "
                     "bytes, but no attention/MLP overlap")


def _gemma2(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    window = cfg.get("sliding_window")
    if isinstance(window, int) and window > 0:
        fields.update(local_attention="sliding", local_attention_size=window, local_attention_skip_freq=2)
    caps = [k for k in ("attn_logit_softcapping", "final_logit_softcapping") if cfg.get(k)]
    if caps:
        notes.append(f"{' and '.join(caps)} (tanh soft-capping) not modelled: elementwise work on attention scores "
                     "and logits, and FlashAttention kernels with soft-capping may be slower")
    notes.append("the extra post-attention and post-MLP RMSNorms (2·hidden parameters per layer) are not counted")


def _phi3small(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    every = cfg.get("dense_attention_every_n_layers")
    if every:
        local = cfg.get("blocksparse_num_local_blocks")
        block = cfg.get("blocksparse_block_size")
        stride = cfg.get("blocksparse_vert_stride")
        sparse = int(fields["num_layers"]) - int(fields["num_layers"]) // int(every)
        notes.append(f"block-sparse attention on {sparse} of {fields['num_layers']} layers ({local} local blocks of "
                     f"{block} tokens plus every {stride}th block) modelled as dense causal attention: attention "
                     "time of those layers is overestimated for sequences longer than "
                     f"{(local or 0) * (block or 0)} tokens")
    if cfg.get("mup_use_scaling"):
        notes.append("muP scaling multipliers ignored (no cost effect)")


def _falcon(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    if cfg.get("new_decoder_architecture"):
        kv = cfg.get("num_kv_heads")
        if kv:
            fields["num_query_groups"] = kv
    elif cfg.get("multi_query", True):
        fields["num_query_groups"] = 1  # Falcon-7B: multi-query attention
    if cfg.get("alibi"):
        fields["position_embedding_type"] = "alibi"
    _note_parallel(cfg, fields, notes)


def _bloom(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    notes.append("the LayerNorm after the word embeddings (2·hidden parameters) is not counted")


def _gpt_neox(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    _partial_rotary(cfg, notes)
    _note_parallel(cfg, fields, notes)


def _gptj(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    fields["add_bias_linear"] = True  # GPT-J: biased MLP and LM head, unbiased attention projections
    notes.append("GPT-J's attention projections have no bias but its MLP does: all linears modelled with biases "
                 "(4·hidden parameters per layer too many)")
    _note_parallel(cfg, fields, notes, always=True)


def _qwen2(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    fields["add_qkv_bias"] = True  # biases on Q, K and V only
    fields["add_bias_linear"] = False
    if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        notes.append(f"sliding-window attention on layers from max_window_layers = {cfg.get('max_window_layers')} "
                     "modelled as full attention (overestimates attention time)")


def _mistral(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    window = cfg.get("sliding_window")
    if isinstance(window, int) and window > 0:
        fields.update(local_attention="sliding", local_attention_size=window)


def _gemma3(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    """Gemma 3: sliding-window attention with every ``sliding_window_pattern``-th layer global (transformers'
    Gemma3TextConfig: window 4096, pattern 6 when absent), or the pattern its ``layer_types`` spell out."""
    from trainsim.io.hf_moe import layer_type_windows

    window = cfg.get("sliding_window", 4096)
    if not layer_type_windows(cfg, fields, int(fields["num_layers"]), window) and isinstance(window, int) \
            and window > 0:
        fields.update(local_attention="sliding", local_attention_size=window,
                      local_attention_skip_freq=int(cfg.get("sliding_window_pattern") or 6))
    if cfg.get("final_logit_softcapping") or cfg.get("attn_logit_softcapping"):
        notes.append("logit soft-capping (tanh) not modelled: elementwise work on the logits")
    notes.append("the per-head q/k RMSNorms and the extra post-attention and post-MLP RMSNorms are not counted")


def _mpt(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    """MPT (llm-foundry): ``expansion_ratio`` × d_model MLP, ``no_bias``, and ``attn_config`` (ALiBi or RoPE,
    grouped-query heads)."""
    ratio = cfg.get("expansion_ratio")
    if isinstance(ratio, int | float) and ratio > 0 and cfg.get("ffn_config", {}).get("ffn_hidden_size") is None:
        fields["ffn_hidden_size"] = int(ratio * int(fields["hidden_size"]))
    if "no_bias" in cfg:
        fields["add_bias_linear"] = not bool(cfg["no_bias"])
    attn = cfg.get("attn_config") or {}
    if attn.get("alibi"):
        fields["position_embedding_type"] = "alibi"
    elif attn.get("rope"):
        fields["position_embedding_type"] = "rope"
    elif cfg.get("learned_pos_emb", True):
        fields["position_embedding_type"] = "learned_absolute"
    kv = attn.get("kv_n_heads")
    if attn.get("attn_type") in ("grouped_query_attention", "multiquery_attention") and kv:
        fields["num_query_groups"] = 1 if attn.get("attn_type") == "multiquery_attention" else int(kv)


def _chatglm(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    """ChatGLM / GLM-4 (THUDM's remote code): SwiGLU MLP, ``rmsnorm``, biases on Q, K and V only
    (``add_qkv_bias``, ``add_bias_linear``), grouped queries in ``multi_query_group_num``."""
    fields["normalization"] = "RMSNorm" if cfg.get("rmsnorm", True) else "LayerNorm"
    fields["add_bias_linear"] = bool(cfg.get("add_bias_linear", False))
    fields["add_qkv_bias"] = bool(cfg.get("add_qkv_bias", True))
    if not cfg.get("multi_query_attention", True):
        fields.pop("num_query_groups", None)
    _partial_rotary(cfg, notes)


def _glm(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    """GLM / GLM-4 in transformers: ``attention_bias`` puts biases on Q, K and V only; half-rotary heads."""
    fields["add_qkv_bias"] = bool(cfg.get("attention_bias", True))
    fields["add_bias_linear"] = False
    _partial_rotary(cfg, notes)


def _partial_rotary(cfg: dict[str, Any], notes: list[str]) -> None:
    """The note for rotary embeddings on part of each head (``rotary_pct``, ``partial_rotary_factor``)."""
    pct = cfg.get("partial_rotary_factor", cfg.get("rotary_pct"))
    if isinstance(pct, int | float) and pct < 1:
        notes.append(f"rotary embedding on {pct:.0%} of each head modelled as full rotary (elementwise, no effect on "
                     "GEMMs)")


def _phi(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    fields["add_bias_linear"] = True  # PhiAttention / PhiMLP: every linear layer has a bias, whatever attention_bias
    _note_parallel(cfg, fields, notes, always=True)  # Phi-1/2: attention and MLP read the same LayerNorm output
    _partial_rotary(cfg, notes)


def _cohere(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    _note_parallel(cfg, fields, notes, always=True)  # Command-R: attention and MLP in parallel on one LayerNorm
    if cfg.get("use_qk_norm"):
        fields["qk_layernorm"] = True


def _opt(cfg: dict[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    if cfg.get("word_embed_proj_dim") not in (None, fields["hidden_size"]):
        notes.append("OPT's word-embedding projection (word_embed_proj_dim) is not counted")


#: Dense decoder families, by ``model_type``. MoE/MLA families live in :mod:`trainsim.io.hf_moe`.
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(),
    "mistral": Architecture(refine=_mistral),
    "qwen2": Architecture(refine=_qwen2),
    "qwen3": Architecture(refine=lambda cfg, fields, notes: fields.update(qk_layernorm=True)),  # per-head q/k norms
    "yi": Architecture(),
    "gemma": Architecture(gated_mlp=True, tied=True),
    "gemma2": Architecture(gated_mlp=True, tied=True, refine=_gemma2),
    # Gemma3TextConfig defaults: vocab 262208 (multimodal configs leave it out of text_config)
    "gemma3": Architecture(gated_mlp=True, tied=True, vocab=262_208, refine=_gemma3),
    "gemma3_text": Architecture(gated_mlp=True, tied=True, vocab=262_208, refine=_gemma3),
    "phi3": Architecture(),
    "phi3small": Architecture(norm="LayerNorm", gated_mlp=True, bias=True, tied=True, refine=_phi3small),
    "falcon": Architecture(norm="LayerNorm", gated_mlp=False, tied=True, context=2048, refine=_falcon),
    "RefinedWebModel": Architecture(norm="LayerNorm", gated_mlp=False, tied=True, context=2048, refine=_falcon),
    "RefinedWeb": Architecture(norm="LayerNorm", gated_mlp=False, tied=True, context=2048, refine=_falcon),
    "bloom": Architecture(positions="alibi", norm="LayerNorm", gated_mlp=False, bias=True, tied=True, refine=_bloom),
    "gpt_neox": Architecture(norm="LayerNorm", gated_mlp=False, bias=True, refine=_gpt_neox),
    "gptj": Architecture(norm="LayerNorm", gated_mlp=False, bias=False, refine=_gptj),
    "gpt2": Architecture(positions="learned_absolute", norm="LayerNorm", gated_mlp=False, bias=True, tied=True),
    "opt": Architecture(positions="learned_absolute", norm="LayerNorm", gated_mlp=False, bias=True, tied=True,
                        refine=_opt),
    "olmo": Architecture(norm="LayerNorm"),
    "olmo2": Architecture(),
    "starcoder2": Architecture(norm="LayerNorm", gated_mlp=False, bias=True),
    "internlm2": Architecture(),
    "chatglm": Architecture(gated_mlp=True, refine=_chatglm),
    "glm": Architecture(gated_mlp=True, refine=_glm),
    "glm4": Architecture(gated_mlp=True, refine=_glm),
    "cohere": Architecture(norm="LayerNorm", tied=True, refine=_cohere),
    "phi": Architecture(norm="LayerNorm", gated_mlp=False, bias=True, refine=_phi),
    "mpt": Architecture(positions="alibi", norm="LayerNorm", gated_mlp=False, tied=True, context=2048, refine=_mpt),
}

#: Architectures trainsim refuses: what they are, so the error can say why.
REFUSED: dict[str, str] = {
    "mamba": "a state-space model", "mamba2": "a state-space model", "falcon_mamba": "a state-space model",
    "jamba": "a hybrid attention/state-space model", "zamba": "a hybrid attention/state-space model",
    "rwkv": "a recurrent model", "recurrent_gemma": "a recurrent model",
    "nemotron_h": "a hybrid attention/state-space model", "zamba2": "a hybrid attention/state-space model",
    "bamba": "a hybrid attention/state-space model", "falcon_h1": "a hybrid attention/state-space model",
    "granitemoehybrid": "a hybrid attention/state-space model", "qwen3_next": "a hybrid linear-attention model",
    "xlstm": "a recurrent model", "qwen3_5": "a hybrid linear-attention model",
    "qwen3_5_text": "a hybrid linear-attention model", "qwen3_5_moe": "a hybrid linear-attention model",
    "qwen3_5_moe_text": "a hybrid linear-attention model", "lfm2": "a hybrid convolution/attention model",
    "lfm2_vl": "a hybrid convolution/attention model", "lfm2_moe": "a hybrid convolution/attention model",
    "t5": "an encoder-decoder model", "bart": "an encoder-decoder model", "mt5": "an encoder-decoder model",
}


#: Keys under which multimodal wrappers keep their language model's config (transformers: text_config; InternVL:
#: llm_config).
LANGUAGE_MODEL_KEYS = ("text_config", "llm_config")
#: ``layer_types`` entries of attention layers; any other kind (Gated DeltaNet "linear_attention", LFM2's "conv",
#: "mamba") is a layer trainsim does not model.
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention", "attention"})
#: Model types that are another family's architecture under a new name (vision-language wrappers' text models,
#: renamed releases): read with that family's reader.
TYPE_ALIASES: dict[str, str] = {
    "qwen2_vl": "qwen2", "qwen2_vl_text": "qwen2", "qwen2_5_vl": "qwen2", "qwen2_5_vl_text": "qwen2",
    "qwen3_vl": "qwen3", "qwen3_vl_text": "qwen3", "qwen3_vl_moe": "qwen3_moe", "qwen3_vl_moe_text": "qwen3_moe",
    "ministral": "mistral", "ministral3": "mistral", "mistral3": "mistral", "olmo3": "olmo2",
}

#: Config keys that say the model uses rotary embeddings (transformers v5 keeps them in rope_parameters).
ROPE_KEYS = ("rope_theta", "rotary_dim", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rotary_pct",
             "rotary_emb_base")

#: Config keys that only state-space / hybrid models carry (Mamba blocks in the layer pattern or their state size).
SSM_KEYS = ("hybrid_override_pattern", "ssm_state_size", "mamba_d_state", "mamba_num_heads", "mamba_expand",
            "attn_layer_period")


def _first(cfg: dict[str, Any], name: str) -> Any:
    for key in _ALIASES[name]:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value <= 0:
        raise TrainsimError(f"config.json.{key}", f"must be a positive integer (got {value!r})", "fix the config.json")
    if value != int(value):
        raise TrainsimError(f"config.json.{key}", f"must be an integer (got {value!r})", "fix the config.json")
    return int(value)


def _moe_types() -> frozenset[str]:
    from trainsim.io.hf_moe import MOE_TYPES

    return frozenset(MOE_TYPES)


def model_from_hf_config(cfg: dict[str, Any], name: str | None = None) -> Model:
    """Build a :class:`Model` from a parsed Hugging Face ``config.json``."""
    if not isinstance(cfg, dict):
        raise TrainsimError("config.json", "is not a JSON object", "pass a Hugging Face model config.json")
    multimodal = [k for k in ("vision_config", "audio_config") if isinstance(cfg.get(k), dict)]
    for inner in LANGUAGE_MODEL_KEYS:  # a multimodal wrapper: its language model's config
        if isinstance(cfg.get(inner), dict) and _first(cfg, "num_layers") is None:
            cfg = {**cfg[inner], "model_type": cfg[inner].get("model_type", cfg.get("model_type"))}
            break
    raw_type = str(cfg.get("model_type", ""))
    model_type = raw_type if raw_type in ARCHITECTURES else raw_type.lower()
    model_type = TYPE_ALIASES.get(model_type, model_type)
    ssm_keys = [k for k in SSM_KEYS if k in cfg]
    other_layers = sorted({str(t) for t in cfg.get("layer_types") or [] if str(t) not in ATTENTION_LAYER_TYPES})
    if model_type in REFUSED or cfg.get("is_encoder_decoder") or ssm_keys or other_layers:
        what = REFUSED.get(model_type) or ("an encoder-decoder model" if cfg.get("is_encoder_decoder") else
                                           f"a model with state-space layers ({ssm_keys[0]})" if ssm_keys else
                                           f"a hybrid model with {', '.join(other_layers)} layers (layer_types)")
        raise TrainsimError("config.json.model_type", f"{raw_type!r} is {what}, which trainsim does not model",
                            "trainsim models decoder-only transformers (dense or MoE)")
    notes: list[str] = [f"{', '.join(multimodal)} ignored: only the language model is modelled (text tokens)"] \
        if multimodal else []
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        if model_type not in _moe_types():
            notes.append(f"model_type {raw_type or '(none)'!r} has no trainsim reader: read with the common field "
                         "names; check the parameter count")
        arch = Architecture()
    fields: dict[str, Any] = {}
    for name_ in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        value = _first(cfg, name_)
        if value is None and name_ == "vocab_size" and arch.vocab is not None:
            value = arch.vocab
            notes.append(f"vocab_size not in the config: the library's default {value} for {raw_type}")
        if value is None:
            raise TrainsimError(f"config.json.{_ALIASES[name_][0]}", "missing",
                                f"the config needs one of {', '.join(_ALIASES[name_])}")
        fields[name_] = _positive_int(value, _ALIASES[name_][0])
    for name_ in ("num_query_groups", "kv_channels", "ffn_hidden_size", "num_experts", "moe_router_topk",
                  "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size"):
        value = _first(cfg, name_)
        if value is not None:
            fields[name_] = value
    for ours, keys in (("hidden_dropout", ("hidden_dropout", "resid_pdrop", "hidden_dropout_prob", "dropout",
                                           "ffn_dropout_prob")),
                       ("attention_dropout", ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob",
                                              "attention_dropout_prob"))):
        value = next((cfg[k] for k in keys if isinstance(cfg.get(k), int | float)), 0.0)
        fields[ours] = float(value)
    if cfg.get("multi_query") and "num_query_groups" not in fields:
        fields["num_query_groups"] = 1
    act = str(cfg.get("hidden_activation") or cfg.get("hidden_act") or cfg.get("activation_function") or "").lower()
    fields["swiglu"] = arch.gated_mlp if arch.gated_mlp is not None else act in _GATED_ACTS
    if not fields["swiglu"] and act in _SQUARED_RELU_ACTS:
        fields["activation"] = "squared_relu"
    if "ffn_hidden_size" not in fields and not fields["swiglu"]:
        fields["ffn_hidden_size"] = 4 * int(fields["hidden_size"])
    if fields.get("moe_ffn_hidden_size") and "ffn_hidden_size" not in fields:
        fields["ffn_hidden_size"] = fields["moe_ffn_hidden_size"]
    norm = arch.norm if model_type in ARCHITECTURES else ("RMSNorm" if "rms_norm_eps" in cfg else "LayerNorm")
    fields["normalization"] = norm
    fields["untie_embeddings_and_output_weights"] = not bool(cfg.get("tie_word_embeddings", arch.tied))
    positions = arch.positions
    if cfg.get("alibi") or cfg.get("position_embedding_type") == "alibi":
        positions = "alibi"
    elif model_type not in ARCHITECTURES and model_type not in _moe_types() and \
            not any(k in cfg for k in ROPE_KEYS) and (cfg.get("position_embedding_type") in ("absolute", "learned")
                                                     or any(k in cfg for k in ("n_positions", "n_ctx"))):
        positions = "learned_absolute"  # GPT-2-style learned positions; any other unknown decoder uses RoPE
    fields["position_embedding_type"] = positions
    bias = cfg.get("attention_bias", cfg.get("use_bias", cfg.get("bias")))
    fields["add_bias_linear"] = arch.bias if bias is None else bool(bias)

    # sequence length: a stated default, never the context limit
    context = _first(cfg, "max_positions") or arch.context
    context = _positive_int(context, "max_position_embeddings") if context is not None else None
    if positions == "learned_absolute":
        if context is None:
            raise TrainsimError("config.json.max_position_embeddings", "missing for learned position embeddings",
                                "add max_position_embeddings (or n_positions) to the config")
        fields["seq_length"] = context  # the learned position table has this many rows
        notes.append(f"{SEQ_LENGTH_NOTE} training sequence length not given: using the model's {context} learned "
                     "positions (give --seq-length)")
    else:
        seq = min(DEFAULT_SEQ_LENGTH, context) if context else DEFAULT_SEQ_LENGTH
        fields["seq_length"] = seq
        limit = f"the config's context limit ({context:,} tokens) is not a training length" if context else \
            "the config states no context length"
        notes.append(f"{SEQ_LENGTH_NOTE} training sequence length not given: using trainsim's default {seq} for "
                     f"Hugging Face configs; {limit} (give --seq-length)")
    if cfg.get("quantization_config"):
        notes.append("quantization_config ignored: training is modelled at the chosen precision (--bf16, --fp8 ...)")
    if arch.refine is not None:
        arch.refine(cfg, fields, notes)
    if "local_attention" not in fields:
        from trainsim.io.hf_moe import layer_type_windows

        layer_type_windows(cfg, fields, int(fields["num_layers"]), cfg.get("sliding_window"))
    cross = cfg.get("cross_attention_layers")
    if isinstance(cross, list) and cross:
        notes.append(f"{len(cross)} cross-attention layers (attending to image tokens) modelled as causal "
                     "self-attention layers")
    fields["name"] = name or str(cfg.get("_name_or_path") or model_type or "hf-model")
    fields["source"] = f"Hugging Face config.json ({raw_type})" if raw_type else "Hugging Face config.json"
    from trainsim.io.hf_moe import moe_fields  # MoE / latent-attention architectures

    fields = moe_fields(cfg, model_type, fields)
    fields["approximations"] = (*fields.get("approximations", ()), *arch.notes, *notes)
    return Model(**fields)


def read_config(path: str | Path, via: Literal["json", "transformers", "auto"] = "json") -> tuple[dict[str, Any], Path]:
    """The config mapping of a ``config.json`` (or a directory holding one) and the file's path.

    ``via="transformers"`` reads it with ``transformers.AutoConfig`` (the ``hf`` extra), so that the library's
    defaults fill in absent keys; ``"auto"`` does so when ``transformers`` is installed and knows the model type,
    else reads the JSON.
    """
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
    if via == "json" or not isinstance(cfg, dict):
        return cfg, p
    try:
        # the optional `hf` extra, imported by name so that type checking gives the same result with or without it
        auto_config: Any = importlib.import_module("transformers").AutoConfig
    except ImportError:
        if via == "transformers":
            raise TrainsimError("model", "reading configs through transformers needs the hf extra",
                                "pip install 'trainsim[hf]', or read the JSON directly") from None
        return cfg, p
    try:
        config_class = auto_config.for_model(str(cfg.get("model_type")))
        full = config_class.from_dict(cfg).to_dict()
    except (ValueError, KeyError, TypeError) as exc:
        if via == "transformers":
            raise TrainsimError("model", f"transformers cannot read {p} ({' '.join(str(exc).split())[:120]})",
                                "read the JSON directly") from None
        return cfg, p
    return {**full, **{k: v for k, v in cfg.items() if k not in full}}, p


def load_hf_config(path: str | Path, via: Literal["json", "transformers", "auto"] = "json") -> Model:
    """Read a Hugging Face ``config.json`` file (or a directory holding one); see :func:`read_config`."""
    cfg, p = read_config(path, via)
    return model_from_hf_config(cfg, name=p.parent.name if p.name == "config.json" else p.stem)
