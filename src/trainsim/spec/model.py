"""Model architecture specification (a decoder-only or encoder transformer, dense or MoE).

Field names follow Megatron-LM's arguments (``--num-layers``, ``--hidden-size``, ``--num-attention-heads``,
``--num-query-groups``, ``--ffn-hidden-size``, ``--swiglu`` ...).
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, model_validator

from trainsim.errors import TrainsimError
from trainsim.spec.base import Spec
from trainsim.spec.limits import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_VOCAB, MAX_WIDTH


def megatron_swiglu_ffn(hidden_size: int) -> int:
    """Megatron's default FFN size with ``--swiglu`` and no ``--ffn-hidden-size``: 2/3·4h rounded down to 64."""
    return int((4 * hidden_size * 2 / 3) / 64) * 64


class Model(Spec):
    """A transformer model.

    ``vocab_size`` is the tokenizer's vocabulary; Megatron pads it to a multiple of
    ``make_vocab_size_divisible_by × tp`` (see :meth:`padded_vocab_size`). For an encoder such as a ViT,
    ``vocab_size`` is the size of the output projection per token and ``input_embedding`` says how tokens enter.
    """

    name: str = "custom"
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: int = Field(gt=0, le=MAX_WIDTH)
    num_attention_heads: int = Field(gt=0, le=MAX_HEADS)
    num_query_groups: int | None = Field(default=None, gt=0, le=MAX_HEADS)
    kv_channels: int | None = Field(default=None, gt=0, le=MAX_WIDTH)
    ffn_hidden_size: int | None = Field(default=None, gt=0, le=MAX_WIDTH)
    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    make_vocab_size_divisible_by: int = Field(default=128, gt=0)
    seq_length: int = Field(default=2048, gt=0, le=MAX_SEQ_LENGTH,
                            description="default/maximum training sequence length")
    swiglu: bool = False
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    untie_embeddings_and_output_weights: bool = False
    position_embedding_type: Literal["learned_absolute", "rope", "alibi", "none"] = "learned_absolute"
    add_bias_linear: bool = True
    causal: bool = True
    hidden_dropout: float = Field(default=0.1, ge=0, lt=1)
    attention_dropout: float = Field(default=0.1, ge=0, lt=1)
    input_embedding: Literal["vocab", "patch"] = "vocab"
    # Mixture of experts (num_experts None or 0: dense).
    num_experts: int | None = Field(default=None, ge=0, le=MAX_EXPERTS)
    moe_router_topk: int = Field(default=2, gt=0, le=MAX_EXPERTS)
    moe_ffn_hidden_size: int | None = Field(default=None, gt=0, le=MAX_WIDTH)
    moe_shared_expert_intermediate_size: int | None = Field(default=None, ge=0, le=MAX_WIDTH)
    moe_layer_freq: int = Field(default=1, gt=0, le=MAX_LAYERS, description="every k-th layer is an MoE layer")
    source: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Model:
        heads, groups = self.num_attention_heads, self.query_groups
        if heads % groups:
            raise TrainsimError(
                "model.num_query_groups",
                f"{heads} attention heads are not divisible by {groups} query groups",
                "choose a number of query groups that divides the number of heads",
            )
        if self.kv_channels is None and self.hidden_size % heads:
            raise TrainsimError(
                "model.hidden_size",
                f"hidden size {self.hidden_size} is not divisible by {heads} heads",
                "give --kv-channels (head dim) explicitly or change the hidden size",
            )
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
        """Number of key/value heads (query groups); equals the heads for multi-head attention."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Per-head dimension (Megatron's ``kv_channels``)."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        """FFN hidden size (per branch for SwiGLU)."""
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

    @property
    def num_moe_layers(self) -> int:
        """Number of layers whose MLP is a mixture of experts."""
        if not self.is_moe:
            return 0
        return len(range(0, self.num_layers, self.moe_layer_freq))

    def padded_vocab_size(self, tp: int = 1) -> int:
        """Vocabulary padded as Megatron does: a multiple of ``make_vocab_size_divisible_by × tp``."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple

    @cached_property
    def attention_params(self) -> int:
        """Parameters of one attention block (QKV + output projection, biases, norm)."""
        h, d = self.hidden_size, self.head_dim
        q = self.num_attention_heads * d
        kv = 2 * self.query_groups * d
        params = h * (q + kv) + q * h
        if self.add_bias_linear:
            params += q + kv + h
        return params + self._norm_params

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
    def dense_mlp_params(self) -> int:
        """Parameters of one dense MLP block (with its norm)."""
        return self._mlp_params(self.ffn_size) + self._norm_params

    @cached_property
    def moe_mlp_params(self) -> int:
        """Parameters of one MoE MLP block: all experts, shared experts, router and norm."""
        shared = self.moe_shared_expert_intermediate_size or 0
        params = (self.num_experts or 0) * self._mlp_params(self.expert_ffn_size)
        if shared:
            params += self._mlp_params(shared)
        return params + (self.num_experts or 0) * self.hidden_size + self._norm_params

    @cached_property
    def layer_params(self) -> int:
        """Average parameters per transformer layer."""
        moe = self.num_moe_layers
        dense = self.num_layers - moe
        total = self.num_layers * self.attention_params + dense * self.dense_mlp_params + moe * self.moe_mlp_params
        return total // self.num_layers

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
        """Total parameters (unpadded layers, padded vocabulary)."""
        moe = self.num_moe_layers
        dense = self.num_layers - moe
        layers = self.num_layers * self.attention_params + dense * self.dense_mlp_params + moe * self.moe_mlp_params
        return layers + self.embedding_params + self.output_params

    @cached_property
    def num_active_params(self) -> int:
        """Parameters touched per token (top-k experts only, for MoE)."""
        if not self.is_moe:
            return self.num_params
        k = self.moe_router_topk
        shared = self.moe_shared_expert_intermediate_size or 0
        active_moe = k * self._mlp_params(self.expert_ffn_size) + (self._mlp_params(shared) if shared else 0)
        active_moe += (self.num_experts or 0) * self.hidden_size + self._norm_params
        moe = self.num_moe_layers
        dense = self.num_layers - moe
        layers = self.num_layers * self.attention_params + dense * self.dense_mlp_params + moe * active_moe
        return layers + self.embedding_params + self.output_params
