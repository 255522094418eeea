"""Model architecture specification (a decoder-only or encoder transformer, dense or MoE).

Field names follow Megatron-LM's arguments (``--num-layers``, ``--hidden-size``, ``--num-attention-heads``,
``--num-query-groups``, ``--ffn-hidden-size``, ``--swiglu`` ...).
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, model_validator

from trainsim.errors import TrainsimError
from trainsim.spec.base import Spec
from trainsim.spec.flags import Flag, NoFlag
from trainsim.spec.limits import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_VOCAB, MAX_WIDTH

#: Prefix of the approximation note saying the training sequence length is a stated default (see
#: :mod:`trainsim.io.hf`); dropped from predictions once the job gives its own sequence length.
SEQ_LENGTH_NOTE = "seq_length:"


def megatron_swiglu_ffn(hidden_size: int) -> int:
    """Megatron's default FFN size with ``--swiglu`` and no ``--ffn-hidden-size``: 2/3·4h rounded down to 64."""
    return int((4 * hidden_size * 2 / 3) / 64) * 64


class Model(Spec, frozen=True):
    """A transformer model.

    ``vocab_size`` is the tokenizer's vocabulary; Megatron pads it to a multiple of
    ``make_vocab_size_divisible_by × tp`` (see :meth:`padded_vocab_size`). For an encoder such as a ViT,
    ``vocab_size`` is the size of the output projection per token and ``input_embedding`` says how tokens enter.
    """

    name: Annotated[str, NoFlag("set by the preset or file (--model)")] = "custom"
    num_layers: Annotated[int, Flag("--num-layers", help="transformer layers")] = Field(gt=0, le=MAX_LAYERS)
    hidden_size: Annotated[int, Flag("--hidden-size", help="hidden size")] = Field(gt=0, le=MAX_WIDTH)
    num_attention_heads: Annotated[int, Flag("--num-attention-heads", help="attention heads")] = Field(
        gt=0, le=MAX_HEADS)
    num_query_groups: Annotated[int | None, Flag("--num-query-groups", help="key/value heads (GQA)")] = Field(
        default=None, gt=0, le=MAX_HEADS)
    kv_channels: Annotated[int | None, Flag("--kv-channels", help="head dimension")] = Field(
        default=None, gt=0, le=MAX_WIDTH)
    ffn_hidden_size: Annotated[int | None, Flag("--ffn-hidden-size", help="FFN hidden size")] = Field(
        default=None, gt=0, le=MAX_WIDTH)
    vocab_size: Annotated[int, Flag("--vocab-size", help="vocabulary size")] = Field(gt=0, le=MAX_VOCAB)
    make_vocab_size_divisible_by: Annotated[int, Flag(
        "--make-vocab-size-divisible-by", help="pad the vocabulary to a multiple of this × tp (default 128)")] = Field(
        default=128, gt=0)
    seq_length: Annotated[int, Flag("--max-position-embeddings", param="max_position_embeddings",
                                    help="model's maximum sequence length", unit="tokens")] = Field(
        default=2048, gt=0, le=MAX_SEQ_LENGTH, description="default/maximum training sequence length")
    swiglu: Annotated[bool, Flag("--swiglu", help="gated SwiGLU MLP")] = False
    activation: Annotated[Literal["gelu", "squared_relu"], Flag(
        "--squared-relu", const="squared_relu", help="squared-ReLU MLP activation (Nemotron)")] = Field(
        default="gelu", description="activation of a non-gated MLP: gelu, or squared_relu (relu(x)², Nemotron-4)")
    normalization: Annotated[Literal["LayerNorm", "RMSNorm"], Flag("--normalization", help="LayerNorm or RMSNorm")] = (
        "LayerNorm")
    untie_embeddings_and_output_weights: Annotated[bool, Flag(
        "--untie-embeddings-and-output-weights", param="untie", help="separate LM head")] = False
    position_embedding_type: Annotated[Literal["learned_absolute", "rope", "alibi", "none"], Flag(
        "--position-embedding-type", help="learned_absolute, rope, alibi or none")] = "learned_absolute"
    add_bias_linear: Annotated[bool, Flag("--disable-bias-linear", const=False,
                                          help="no biases in the linear layers (Llama-style)")] = True
    add_qkv_bias: Annotated[bool, Flag("--add-qkv-bias", help="biases on Q, K and V only (Qwen2)")] = Field(
        default=False, description="biases on Q, K and V only (Qwen2)")
    causal: Annotated[bool, Flag("--bidirectional", const=False, megatron=False,
                                 help="bidirectional (non-causal) attention, as in encoders such as ViT")] = True
    hidden_dropout: Annotated[float, Flag("--hidden-dropout", help="dropout after attention and MLP (default 0.1)",
                                          unit="probability")] = Field(default=0.1, ge=0, lt=1)
    attention_dropout: Annotated[float, Flag("--attention-dropout", help="dropout on attention scores (default 0.1)",
                                             unit="probability")] = Field(default=0.1, ge=0, lt=1)
    input_embedding: Annotated[Literal["vocab", "patch"], Flag(
        "--input-embedding", megatron=False, help="how tokens enter: vocab (token embedding) or patch (ViT)")] = "vocab"
    qk_layernorm: Annotated[bool, Flag("--qk-layernorm", help="RMSNorm on each query/key head (Qwen3, OLMo2)")] = Field(
        default=False, description="RMSNorm on each query/key head (Qwen3, OLMo2)")
    attention_sinks: Annotated[bool, Flag("--attention-sinks", megatron=False,
                                          help="a learned sink logit per head (GPT-OSS)")] = Field(
        default=False, description="a learned sink logit per head (GPT-OSS)")
    # Local attention on some layers: a sliding window (GPT-OSS, Mistral) or chunked attention (Llama 4). Megatron's
    # --window-size / --window-attn-skip-freq: every ``local_attention_skip_freq``-th layer (1-based) stays global.
    local_attention: Annotated[Literal["none", "sliding", "chunked"], Flag(
        "--local-attention", megatron=False, help="local attention on some layers: none, sliding (window) or "
                                                  "chunked")] = "none"
    local_attention_size: Annotated[int | None, Flag("--local-attention-size", megatron=False,
                                                     help="window or chunk length", unit="tokens")] = Field(
        default=None, gt=0, le=MAX_SEQ_LENGTH, description="window or chunk length (tokens)")
    local_attention_skip_freq: Annotated[int | None, Flag(
        "--window-attn-skip-freq", help="every n-th layer is global (default: all layers local)")] = Field(
        default=None, gt=0, description="every n-th layer is global; None: all layers local")
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2); Megatron's --multi-latent-attention and its sizes.
    multi_latent_attention: Annotated[bool, Flag("--multi-latent-attention",
                                                 help="multi-head latent attention (MLA)")] = False
    q_lora_rank: Annotated[int | None, Flag("--q-lora-rank", help="MLA query compression rank")] = Field(
        default=None, gt=0, le=MAX_WIDTH, description="query compression rank (None: no q down-proj)")
    kv_lora_rank: Annotated[int, Flag("--kv-lora-rank", help="MLA key/value compression rank")] = Field(
        default=512, gt=0, le=MAX_WIDTH)
    qk_head_dim: Annotated[int, Flag("--qk-head-dim", help="MLA: per-head query/key dim without RoPE")] = Field(
        default=128, gt=0, description="MLA: per-head query/key dim without RoPE")
    qk_pos_emb_head_dim: Annotated[int, Flag("--qk-pos-emb-head-dim", help="MLA: decoupled RoPE dim per head")] = Field(
        default=64, gt=0, description="MLA: decoupled RoPE dim per head")
    v_head_dim: Annotated[int, Flag("--v-head-dim", help="MLA: per-head value dim")] = Field(
        default=128, gt=0, description="MLA: per-head value dim")
    # Mixture of experts (num_experts None or 0: dense).
    num_experts: Annotated[int | None, Flag("--num-experts", help="MoE experts")] = Field(
        default=None, ge=0, le=MAX_EXPERTS)
    moe_router_topk: Annotated[int, Flag("--moe-router-topk", help="experts per token")] = Field(
        default=2, gt=0, le=MAX_EXPERTS)
    moe_router_num_groups: Annotated[int | None, Flag(
        "--moe-router-num-groups", help="group-limited routing: expert groups (DeepSeek n_group)")] = (
        Field(default=None, gt=0, le=MAX_EXPERTS,
              description="group-limited (device/node-limited) routing: the experts are split in this many groups "
                          "(DeepSeek's n_group, Megatron's --moe-router-num-groups); None: no groups"))
    moe_router_group_topk: Annotated[int | None, Flag(
        "--moe-router-group-topk", help="group-limited routing: groups a token may use (DeepSeek topk_group)")] = (
        Field(default=None, gt=0, le=MAX_EXPERTS,
              description="group-limited routing: a token picks its experts inside its best groups, this many "
                          "(DeepSeek's topk_group; DeepSeek-V3: 4 of 8, each token reaches at most 4 nodes)"))
    moe_ffn_hidden_size: Annotated[int | None, Flag("--moe-ffn-hidden-size", help="expert FFN size")] = Field(
        default=None, gt=0, le=MAX_WIDTH)
    moe_shared_expert_intermediate_size: Annotated[int | None, Flag(
        "--moe-shared-expert-intermediate-size", help="FFN size of the shared expert(s)")] = Field(
        default=None, ge=0, le=MAX_WIDTH)
    moe_layer_freq: Annotated[int, Flag("--moe-layer-freq", help="every n-th layer is MoE")] = Field(
        default=1, gt=0, le=MAX_LAYERS, description="every k-th layer is an MoE layer")
    moe_layer_offset: Annotated[int, Flag("--moe-layer-offset", megatron=False,
                                          help="MoE layers are those with index % freq == offset")] = Field(
        default=0, ge=0, description="MoE layers are those with index % moe_layer_freq == offset")
    moe_first_k_dense: Annotated[int, Flag("--moe-first-k-dense", megatron=False,
                                           help="the first k layers are dense (DeepSeek's first_k_dense_replace)")] = (
        Field(default=0, ge=0, le=MAX_LAYERS, description="the first k layers are dense (DeepSeek)"))
    moe_shared_expert_gate: Annotated[bool, Flag("--moe-shared-expert-gate", megatron=False,
                                                 help="sigmoid gate on the shared expert (Qwen2-MoE)")] = Field(
        default=False, description="sigmoid gate on the shared expert (Qwen2-MoE)")
    moe_router_bias: Annotated[bool, Flag("--moe-router-bias", megatron=False,
                                          help="the router linear has a bias (GPT-OSS)")] = Field(
        default=False, description="the router linear has a bias (GPT-OSS)")
    moe_expert_capacity_factor: Annotated[float | None, Flag(
        "--moe-expert-capacity-factor", help="expert capacity (token dropping); default dropless")] = Field(
        default=None, gt=0, description="token capacity per expert as a multiple of the balanced load; None: dropless"
    )
    moe_load_imbalance: Annotated[float, Flag(
        "--moe-load-imbalance", megatron=False,
        help="tokens of the busiest expert-parallel rank / the mean (default 1: balanced)")] = Field(
        default=1.0, ge=1.0, description="tokens of the busiest expert-parallel rank / the mean (1: balanced)"
    )
    moe_router_load_balancing_type: Annotated[Literal["aux_loss", "seq_aux_loss", "none"], Flag(
        "--moe-router-load-balancing-type", help="load-balancing loss")] = "aux_loss"
    moe_router_enable_expert_bias: Annotated[bool, Flag(
        "--moe-router-enable-expert-bias", help="auxiliary-loss-free load balancing (expert bias)")] = Field(
        default=False, description="auxiliary-loss-free balancing with a per-expert bias")
    mtp_num_layers: Annotated[int, Flag("--mtp-num-layers", help="multi-token prediction depth")] = Field(
        default=0, ge=0, le=MAX_LAYERS, description="multi-token prediction depth (DeepSeek-V3 MTP)")
    source: Annotated[str | None, NoFlag("descriptive: where the architecture comes from")] = None
    approximations: Annotated[tuple[str, ...], NoFlag("written by the model loaders, printed with predictions")] = (
        Field(default=(), description="features of the source architecture modelled approximately (printed with "
                                      "predictions)"))

    @model_validator(mode="after")
    def _check(self) -> Model:
        heads, groups = self.num_attention_heads, self.query_groups
        if heads % groups:
            raise TrainsimError(
                "model.num_query_groups",
                f"{heads} attention heads are not divisible by {groups} query groups",
                "choose a number of query groups that divides the number of heads",
            )
        if self.kv_channels is None and not self.multi_latent_attention and self.hidden_size % heads:
            raise TrainsimError(
                "model.hidden_size",
                f"hidden size {self.hidden_size} is not divisible by {heads} heads",
                "give --kv-channels (head dim) explicitly or change the hidden size",
            )
        if self.swiglu and self.activation != "gelu":
            raise TrainsimError("model.activation", f"a gated SwiGLU MLP has no {self.activation} activation",
                                "drop --swiglu or --squared-relu (Megatron accepts one of them)")
        if self.local_attention != "none" and self.local_attention_size is None:
            raise TrainsimError(
                "model.local_attention_size",
                f"{self.local_attention} attention needs its window/chunk length",
                "give local_attention_size (e.g. 128 for GPT-OSS, 8192 for Llama 4)",
            )
        if self.is_moe and self.moe_first_k_dense >= self.num_layers:
            raise TrainsimError(
                "model.moe_first_k_dense",
                f"all {self.num_layers} layers would be dense",
                "use fewer first dense layers than layers",
            )
        groups, picked = self.moe_router_num_groups, self.moe_router_group_topk
        if self.is_moe and (groups is None) != (picked is None):
            raise TrainsimError("model.moe_router_group_topk", "group-limited routing needs both the number of groups "
                                "and the groups a token uses", "give --moe-router-num-groups and "
                                "--moe-router-group-topk together (or neither)")
        if self.is_moe and groups is not None and picked is not None and (
                (self.num_experts or 0) % groups or picked > groups
                or self.moe_router_topk > picked * ((self.num_experts or 0) // groups)):
            raise TrainsimError("model.moe_router_num_groups", f"{groups} groups picking {picked} cannot route top-"
                                f"{self.moe_router_topk} over {self.num_experts} experts",
                                "use groups dividing the experts, at most that many picked, holding the top-k")
        if self.is_moe and self.moe_router_topk > (self.num_experts or 0):
            raise TrainsimError(
                "model.moe_router_topk",
                f"top-k {self.moe_router_topk} exceeds the {self.num_experts} experts",
                "use a top-k no larger than the number of experts",
            )
        return self

    # ---- derived sizes -------------------------------------------------------------------------------------------
    @property
    def query_groups(self) -> int:
        """Number of key/value heads (query groups); equals the heads for multi-head attention and MLA."""
        if self.multi_latent_attention:
            return self.num_attention_heads
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Per-head query/key dimension (Megatron's ``kv_channels``; MLA: no-RoPE plus RoPE part)."""
        if self.multi_latent_attention:
            return self.qk_head_dim + self.qk_pos_emb_head_dim
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def v_dim(self) -> int:
        """Per-head value dimension (equals :attr:`head_dim` except with MLA)."""
        return self.v_head_dim if self.multi_latent_attention else self.head_dim

    @property
    def mlp_activation(self) -> str:
        """The MLP's activation: ``swiglu`` (gated), else :attr:`activation`."""
        return "swiglu" if self.swiglu else self.activation

    @property
    def ffn_size(self) -> int:
        """FFN hidden size of the dense layers (per branch for SwiGLU)."""
        if self.ffn_hidden_size is not None:
            return self.ffn_hidden_size
        return megatron_swiglu_ffn(self.hidden_size) if self.swiglu else 4 * self.hidden_size

    @property
    def is_moe(self) -> bool:
        """True when the model has mixture-of-experts layers."""
        return bool(self.num_experts)

    @property
    def expert_ffn_size(self) -> int:
        """FFN hidden size of one expert."""
        return self.moe_ffn_hidden_size or self.ffn_size

    def is_moe_layer(self, layer: int) -> bool:
        """Whether transformer layer ``layer`` (0-based) has an MoE MLP.

        Layer ``i`` is MoE when ``i ≥ moe_first_k_dense`` and ``i % moe_layer_freq == moe_layer_offset``: Megatron's
        integer ``--moe-layer-freq`` (offset 0), DeepSeek's ``first_k_dense_replace``, Qwen-MoE's
        ``decoder_sparse_step`` and Llama 4's ``interleave_moe_layer_step`` (offset ``step − 1``).
        """
        return (self.is_moe and layer >= self.moe_first_k_dense
                and layer % self.moe_layer_freq == self.moe_layer_offset % self.moe_layer_freq)

    @cached_property
    def moe_layer_flags(self) -> tuple[bool, ...]:
        """:meth:`is_moe_layer` of every layer."""
        return tuple(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def num_moe_layers(self) -> int:
        """Number of layers whose MLP is a mixture of experts."""
        return sum(self.moe_layer_flags)

    def is_local_attention_layer(self, layer: int) -> bool:
        """Whether ``layer`` (0-based) attends only within a window/chunk (Megatron's ``--window-attn-skip-freq``:
        every ``freq``-th layer counted from 1 is global)."""
        if self.local_attention == "none":
            return False
        freq = self.local_attention_skip_freq
        return freq is None or (layer + 1) % freq != 0

    @cached_property
    def local_attention_layers(self) -> int:
        """Number of layers with sliding-window or chunked attention."""
        return sum(self.is_local_attention_layer(i) for i in range(self.num_layers))

    def attention_keys(self, seq: int) -> float:
        """Mean number of keys one query attends to in a causal layer, averaged over the layers (the FLOP scale of
        the attention scores: ``seq/2`` for full causal attention).

        A sliding window of ``w`` tokens gives ``(s·w − w(w−1)/2)/s`` keys per query; chunks of ``c`` tokens give
        ``(c + 1)/2``.
        """
        full = (seq + 1) / 2
        n_local = self.local_attention_layers
        if not n_local:
            return full
        size = min(self.local_attention_size or seq, seq)
        if self.local_attention == "sliding":
            local = (seq * size - size * (size - 1) / 2) / seq
        else:
            local = (size + 1) / 2 * (seq // size * size) / seq + (seq % size + 1) / 2 * (seq % size) / seq
        return (n_local * local + (self.num_layers - n_local) * full) / self.num_layers

    def padded_vocab_size(self, tp: int = 1) -> int:
        """Vocabulary padded as Megatron does: a multiple of ``make_vocab_size_divisible_by × tp``."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple

    @cached_property
    def attention_replicated_params(self) -> int:
        """Attention parameters every tensor-parallel rank holds in full: the norm, and with MLA the down-projections
        and latent norms (Megatron builds them ``duplicated``)."""
        params = self._norm_params
        if self.multi_latent_attention:
            h, rope = self.hidden_size, self.qk_pos_emb_head_dim
            if self.q_lora_rank:
                params += h * self.q_lora_rank + self.q_lora_rank
            params += h * (self.kv_lora_rank + rope) + self.kv_lora_rank
        return params

    @cached_property
    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, q/k norms, sinks and the input norm)."""
        h, heads = self.hidden_size, self.num_attention_heads
        if self.multi_latent_attention:
            qk = self.qk_head_dim + self.qk_pos_emb_head_dim
            q_in = self.q_lora_rank or h
            params = q_in * heads * qk  # query up-projection (or the full query projection)
            params += self.kv_lora_rank * heads * (self.qk_head_dim + self.v_head_dim)  # key/value up-projection
            params += heads * self.v_head_dim * h  # output projection
            return params + self.attention_replicated_params
        d = self.head_dim
        q = heads * d
        kv = 2 * self.query_groups * d
        params = h * (q + kv) + q * h
        if self.add_bias_linear or self.add_qkv_bias:
            params += q + kv
        if self.add_bias_linear:
            params += h
        if self.qk_layernorm:
            params += 2 * d
        if self.attention_sinks:
            params += heads
        return params + self._norm_params

    @cached_property
    def attention_linear_params(self) -> int:
        """Weights of the attention block's linear layers (the GEMMs: 2 FLOPs per weight per token)."""
        h, heads = self.hidden_size, self.num_attention_heads
        if self.multi_latent_attention:
            qk = self.qk_head_dim + self.qk_pos_emb_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * qk) if self.q_lora_rank else h * heads * qk
            kv = h * (self.kv_lora_rank + self.qk_pos_emb_head_dim)
            kv += self.kv_lora_rank * heads * (self.qk_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h
        q = heads * self.head_dim
        return h * (q + 2 * self.query_groups * self.head_dim) + q * h

    def attention_span(self, seq: int) -> float:
        """Attention-score work relative to full causal attention over ``seq`` tokens, averaged over the layers
        (1.0 without sliding-window or chunked layers)."""
        return self.attention_keys(seq) / ((seq + 1) / 2)

    @property
    def _norm_params(self) -> int:
        return self.hidden_size * (2 if self.normalization == "LayerNorm" else 1)

    def _mlp_params(self, ffn: int) -> int:
        h = self.hidden_size
        up = 2 * ffn if self.swiglu else ffn
        params = h * up + ffn * h
        if self.add_bias_linear:
            params += up + h
        return params

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self._mlp_params(self.expert_ffn_size)

    @cached_property
    def router_params(self) -> int:
        """Parameters of one router (gate)."""
        experts = self.num_experts or 0
        return experts * self.hidden_size + (experts if self.moe_router_bias else 0)

    @cached_property
    def shared_expert_params(self) -> int:
        """Parameters of the shared expert(s) of one MoE layer (Megatron: one MLP of the summed size)."""
        shared = self.moe_shared_expert_intermediate_size or 0
        if not shared:
            return 0
        return self._mlp_params(shared) + (self.hidden_size if self.moe_shared_expert_gate else 0)

    @cached_property
    def dense_mlp_params(self) -> int:
        """Parameters of one dense MLP block (with its norm)."""
        return self._mlp_params(self.ffn_size) + self._norm_params

    @cached_property
    def moe_mlp_params(self) -> int:
        """Parameters of one MoE MLP block: all experts, shared experts, router and norm."""
        return ((self.num_experts or 0) * self.expert_params + self.shared_expert_params + self.router_params
                + self._norm_params)

    @cached_property
    def _layers_params(self) -> int:
        moe = self.num_moe_layers
        dense = self.num_layers - moe
        return self.num_layers * self.attention_params + dense * self.dense_mlp_params + moe * self.moe_mlp_params

    @cached_property
    def layer_params(self) -> int:
        """Average parameters per transformer layer."""
        return self._layers_params // self.num_layers

    @cached_property
    def mtp_layer_params(self) -> int:
        """Parameters of one multi-token-prediction module without the shared embedding and output head: the two
        input norms, the ``2h → h`` projection, one transformer layer (MoE for MoE models) and its final norm."""
        if not self.mtp_num_layers:
            return 0
        h = self.hidden_size
        mlp = self.moe_mlp_params if self.is_moe else self.dense_mlp_params
        return 2 * self._norm_params + 2 * h * h + self.attention_params + mlp + self._norm_params

    @cached_property
    def mtp_params(self) -> int:
        """Parameters of all multi-token-prediction modules (not counted in published model sizes)."""
        return self.mtp_num_layers * self.mtp_layer_params

    @cached_property
    def embedding_params(self) -> int:
        """Input embedding parameters (token or patch embedding plus learned positions)."""
        h = self.hidden_size
        params = self.padded_vocab_size() * h
        if self.position_embedding_type == "learned_absolute":
            params += self.seq_length * h
        return params

    @cached_property
    def output_params(self) -> int:
        """Output layer (LM head) parameters when untied, plus the final norm."""
        head = self.padded_vocab_size() * self.hidden_size if self.untie_embeddings_and_output_weights else 0
        return head + self._norm_params

    @cached_property
    def num_params(self) -> int:
        """Total trained parameters (unpadded layers, padded vocabulary, multi-token-prediction modules included)."""
        return self._layers_params + self.embedding_params + self.output_params + self.mtp_params

    @cached_property
    def num_active_params(self) -> int:
        """Parameters touched per token (top-k routed experts only, for MoE; MTP modules excluded)."""
        if not self.is_moe:
            return self.num_params - self.mtp_params
        idle = (self.num_experts or 0) - self.moe_router_topk
        return self.num_params - self.mtp_params - self.num_moe_layers * idle * self.expert_params
