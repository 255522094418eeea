"""Builders: a runnable PyTorch operator for each :class:`~trainsim.workload.ops.ComputeOp`, with its exact shape.

- **GEMMs** in the op's data type with the operand layouts of ``nn.Linear`` and its autograd: forward
  ``Y = X·Wᵀ`` (``F.linear``; QKV with its bias), data gradient ``dX = dY·W``, weight gradient ``dW = dYᵀ·X``;
  batched GEMMs (unfused attention, MoE experts) with ``torch.bmm``. TF32 GEMMs run fp32 tensors with TF32 tensor
  cores allowed (on a GPU; a CPU runs them in fp32). FP8 GEMMs use ``torch._scaled_mm`` (E4M3 operands, bf16
  output; dimensions padded to multiples of 16) and need a GPU of compute capability 8.9 or later.
- **Attention** with ``F.scaled_dot_product_attention`` on ``[batch, heads, seq, head_dim]`` (FlashAttention on a GPU
  where PyTorch can; ``attention_backend`` forces one), with the model's attention dropout, causal where the op is.
  K and V get as many heads as Q (grouped-query attention does the same arithmetic). With a shard, tensors are in
  its activation type (the workload keys every attention op as bf16). A causal op with ``seq_q < seq_kv`` (context
  parallelism: local queries, all keys, load-balanced) runs as non-causal attention over ``seq_kv / 2`` keys, which
  has its FLOPs. Backward: ``torch.autograd.grad`` through the saved forward.
- **Elementwise kernels** by name (norms, RoPE, bias-dropout-add, bias-GeLU, SwiGLU, softmax and dropout of unfused
  attention, embedding lookup, cross-entropy, MoE permutations, FP8 casts) from :mod:`trainsim.profile.kernels`,
  with shapes from the model and the shard exactly as :mod:`trainsim.workload.layers` sizes them; backward through
  autograd. An unknown name is timed as a copy moving the op's bytes (``builder == "generic_copy"``).
- The **optimizer step**: gradient clipping and AdamW (fused where PyTorch has it) over the parameters of one layer.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainsim.cost.tables import gemm_layout
from trainsim.errors import TrainsimError
from trainsim.profile import kernels as K
from trainsim.spec.model import Model
from trainsim.workload.fp8 import RECIPES as FP8_RECIPES
from trainsim.workload.fp8 import recipe_cost
from trainsim.workload.fusion import Fusion, cross_entropy_bytes
from trainsim.workload.layers import Shard, moe_expert_tokens
from trainsim.workload.ops import ComputeOp

BIASED_GEMMS = ("qkv", "patch_embed")  # GEMMs whose bias Megatron adds inside the GEMM (no separate op)
ATTENTION_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")
_SDP_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}

# Bytes per processed element of each elementwise kernel as trainsim.workload.layers counts them (e: bytes per
# activation element); ``elements × this == op.bytes`` checks that a builder has the workload's shape.
BYTES_PER_ELEMENT: dict[tuple[str, str], Callable[[float], float]] = {
    ("norm", "fwd"): lambda e: 2 * e, ("norm", "bwd"): lambda e: 3 * e,
    ("bias_dropout_add", "fwd"): lambda e: 3 * e + 1, ("bias_dropout_add", "bwd"): lambda e: 3 * e + 1,
    ("rope", "fwd"): lambda e: 2 * e, ("rope", "bwd"): lambda e: 2 * e,
    ("swiglu", "fwd"): lambda e: 3 * e, ("swiglu", "bwd"): lambda e: 5 * e,
    ("bias_gelu", "fwd"): lambda e: 2 * e, ("bias_gelu", "bwd"): lambda e: 3 * e,
    ("squared_relu", "fwd"): lambda e: 4 * e, ("squared_relu", "bwd"): lambda e: 6 * e,
    ("bias_squared_relu", "fwd"): lambda e: 6 * e, ("bias_squared_relu", "bwd"): lambda e: 6 * e,
    ("softmax", "fwd"): lambda e: 2 * e, ("softmax", "bwd"): lambda e: 3 * e,
    ("dropout", "fwd"): lambda e: 2 * e + 1, ("dropout", "bwd"): lambda e: 2 * e + 1,
    ("embedding", "fwd"): lambda e: 3 * e, ("embedding", "bwd"): lambda e: 2 * e + 4,
    **{(f"cross_entropy_{impl}", phase): (
        lambda e, f=Fusion(cross_entropy_impl=impl), i=i: cross_entropy_bytes(f, e)[i])
       for impl in ("vocab_parallel", "torch", "torch_16bit") for i, phase in enumerate(("fwd", "bwd"))},
    ("bias", "fwd"): lambda e: 2 * e, ("bias", "bwd"): lambda e: e,
    ("qkv_split", "bwd"): lambda e: 2 * e,
    ("permute", "fwd"): lambda e: 2 * e, ("permute", "bwd"): lambda e: 2 * e,
    ("unpermute", "fwd"): lambda e: 3 * e, ("unpermute", "bwd"): lambda e: 3 * e,
    ("router_topk", "fwd"): lambda e: 24.0, ("router_topk", "bwd"): lambda e: 16.0,
    **{(f"fp8_cast_{name}", phase): (lambda e, c=cost.cast_bytes: c) for name, cost in FP8_RECIPES.items()
       for phase in ("fwd", "bwd")},  # backward: the output-gradient cast (fp8_grad_cast), the same kernel
}


@dataclass(frozen=True)
class OpContext:
    """What a builder needs besides the op: the device, and the model and shard that sized the op."""

    device: torch.device
    model: Model | None = None
    shard: Shard | None = None
    attention_backend: str = "auto"

    @property
    def act_dtype(self) -> torch.dtype:
        """Activation tensor type of the shard's precision (bf16 for FP8 training)."""
        precision = self.shard.precision if self.shard is not None else "bf16"
        return {"fp32": torch.float32, "fp16": torch.float16}.get(precision, torch.bfloat16)


@dataclass
class Built:
    """A runnable operator: ``fn()`` executes it once."""

    fn: Callable[[], object]
    builder: str
    backend: str = ""
    kind: str = ""  # elementwise family (a key of BYTES_PER_ELEMENT), for checks
    elements: int = 0
    matmul_precision: str | None = None  # torch.set_float32_matmul_precision while timing (TF32 vs FP32)


def build(op: ComputeOp, ctx: OpContext) -> Built:
    """A runnable PyTorch version of ``op``."""
    if op.kind == "gemm":
        return _gemm(op, ctx)
    if op.kind == "attention":
        return _attention(op, ctx)
    return _elementwise(op, ctx)


def _randn(shape: tuple[int, ...], ctx: OpContext, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, device=ctx.device, dtype=dtype)


# ---- GEMMs --------------------------------------------------------------------------------------------------------
def _gemm(op: ComputeOp, ctx: OpContext) -> Built:
    if op.dtype == "fp8":
        return _gemm_fp8(op, ctx)
    layout = gemm_layout(op)
    dt = K.torch_dtype(op.dtype)
    b, m, n, k = op.batch, op.m, op.n, op.k
    # TF32 is a GPU notion: on a CPU fp32 GEMMs stay fp32 (as in CPU training)
    precision = ("high" if op.dtype == "tf32" else "highest") if op.dtype in ("tf32", "fp32") else None
    if ctx.device.type != "cuda":
        precision = None

    def t(*shape: int) -> torch.Tensor:
        return _randn(shape, ctx, dt)

    call: Callable[[], object]
    if b == 1:
        if layout == "fwd":
            x, w = t(m, k), t(n, k)
            model = ctx.model
            bias = t(n) if model is not None and model.add_bias_linear and op.name in BIASED_GEMMS else None
            call = lambda: F.linear(x, w, bias)  # noqa: E731  Y = X·Wᵀ
            name = "linear"
        elif layout == "dgrad":
            dy, w = t(m, k), t(k, n)
            call = lambda: torch.matmul(dy, w)  # noqa: E731  dX = dY·W
            name = "matmul_nn"
        else:
            x, dy = t(k, m), t(k, n)
            call = lambda: torch.matmul(dy.t(), x)  # noqa: E731  dW = dYᵀ·X
            name = "matmul_tn"
    else:
        if layout == "wgrad":
            x, dy = t(b, k, m), t(b, k, n)
            call = lambda: torch.bmm(dy.transpose(1, 2), x)  # noqa: E731
            name = "bmm_tn"
        else:
            a, w = t(b, m, k), t(b, k, n)
            call = lambda: torch.bmm(a, w)  # noqa: E731
            name = "bmm"
    return Built(call, name, matmul_precision=precision)


def _gemm_fp8(op: ComputeOp, ctx: OpContext) -> Built:
    dev = ctx.device
    if dev.type != "cuda" or not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability(dev) < (8, 9):
        raise TrainsimError("training.precision", "FP8 GEMMs need a GPU with FP8 tensor cores (compute capability "
                            "8.9+, e.g. H100) and torch._scaled_mm",
                            "profile with --bf16, or on an FP8-capable GPU")
    pad = lambda v: -(-v // 16) * 16  # noqa: E731
    m, n, k = pad(op.m), pad(op.n), pad(op.k)
    e4m3 = torch.float8_e4m3fn
    a = [torch.randn(m, k, device=dev).to(e4m3) for _ in range(op.batch)]
    b = [torch.randn(n, k, device=dev).to(e4m3).t() for _ in range(op.batch)]  # column-major, as cuBLASLt wants
    one = torch.ones((), device=dev, dtype=torch.float32)

    def call() -> None:
        for ai, bi in zip(a, b, strict=True):
            # FP8 GEMMs have no public PyTorch API yet; _scaled_mm is what Transformer Engine-free code calls
            torch._scaled_mm(ai, bi, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # pyright: ignore[reportPrivateImportUsage]

    return Built(call, "scaled_mm_e4m3")


# ---- attention ----------------------------------------------------------------------------------------------------
def _sdpa_context(backend: str) -> contextlib.AbstractContextManager[Any]:
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    choice = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    return sdpa_kernel([choice])


def _chosen_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, causal: bool) -> str:
    try:
        # PyTorch's own choice for these inputs (private, hence the guard; no public API tells it)
        idx = torch._fused_sdp_choice(q, k, v, None, p, causal)  # pyright: ignore[reportPrivateImportUsage]
    except (AttributeError, RuntimeError, TypeError):
        return "auto"
    return _SDP_NAMES.get(int(idx), "auto")


def _attention(op: ComputeOp, ctx: OpContext) -> Built:
    assert op.attn is not None
    b, h, sq, skv, d, causal = op.attn
    backend = ctx.attention_backend
    if backend not in ATTENTION_BACKENDS:
        raise TrainsimError("attention_backend", f"unknown backend {backend!r}", f"use {', '.join(ATTENTION_BACKENDS)}")
    # the workload keys attention as bf16 whatever the precision: run it in the shard's activation type
    dt = ctx.act_dtype if ctx.shard is not None else K.torch_dtype("bf16" if op.dtype == "fp8" else op.dtype)
    if causal and sq != skv:  # context-parallel share of a causal attention: half of the keys, unmasked
        kv, is_causal = max(1, skv // 2), False
    else:
        kv, is_causal = skv, bool(causal)
    p = float(ctx.model.attention_dropout) if ctx.model is not None else 0.0
    q = _randn((b, h, sq, d), ctx, dt)
    k = _randn((b, h, kv, d), ctx, dt)
    v = _randn((b, h, kv, d), ctx, dt)
    used = backend if backend != "auto" else _chosen_backend(q, k, v, p, is_causal)
    try:
        if op.phase == "fwd":
            def call() -> object:
                with _sdpa_context(backend):
                    return K.attention(q, k, v, is_causal, p)
            call()
        else:
            for x in (q, k, v):
                x.requires_grad_(True)
            with _sdpa_context(backend):
                out = K.attention(q, k, v, is_causal, p)
            grad = torch.randn_like(out)
            call = lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)  # noqa: E731
    except RuntimeError as exc:
        if backend == "auto":
            raise
        raise TrainsimError("attention_backend", f"the {backend} backend cannot run {op.name} "
                            f"({b}x{h}x{sq}x{kv}x{d} {op.dtype}): {str(exc).splitlines()[0]}",
                            "use --attention-backend auto") from None
    return Built(call, "sdpa", used)


# ---- elementwise --------------------------------------------------------------------------------------------------
@dataclass
class _Fwd:
    """A forward function, its inputs, which of them are differentiable, and the elements it processes."""

    f: Callable[..., Any]
    inputs: list[torch.Tensor]
    diff: list[int]
    elements: int
    kind: str


def _ffn(prefix: str, model: Model, shard: Shard) -> tuple[int, int]:
    """(rows, local FFN width) of the MLP named ``prefix`` (mlp, expert, shared_expert)."""
    t, tp = shard.tokens, shard.tp
    if prefix == "expert":
        local = max(1, (model.num_experts or 1) // shard.ep)
        per_expert = max(1, round(moe_expert_tokens(model, shard)[1] / local))
        return local * per_expert, model.expert_ffn_size // shard.expert_tp
    if prefix == "shared_expert":
        return t, (model.moe_shared_expert_intermediate_size or 0) // tp
    return t, model.ffn_size // tp


def _biased_width(linear: str, model: Model, shard: Shard) -> int:
    """Output columns on this GPU of the linear layer named ``linear`` (0: not a biased linear layer)."""
    tp = shard.tp
    if linear == "qkv":
        return (model.num_attention_heads + 2 * model.query_groups) // tp * model.head_dim
    if linear == "attn_proj":
        return model.hidden_size
    for prefix in ("shared_expert", "expert", "mlp"):
        if linear == f"{prefix}_fc1":
            return _ffn(prefix, model, shard)[1] * (2 if model.swiglu else 1)
        if linear == f"{prefix}_fc2":
            return model.hidden_size
    return 0


def _forward_spec(base: str, op: ComputeOp, ctx: OpContext) -> _Fwd | None:
    model, shard = ctx.model, ctx.shard
    if model is None or shard is None:
        return None
    act = ctx.act_dtype
    h, tp = model.hidden_size, shard.tp
    t, te = shard.tokens, shard.elementwise_tokens
    bias_on = model.add_bias_linear

    def r(*shape: int, dtype: torch.dtype = act) -> torch.Tensor:
        return _randn(shape, ctx, dtype)

    widths = {"q_norm": (t, model.q_lora_rank or 1), "kv_norm": (t, model.kv_lora_rank),
              "qk_norm": (t * (model.num_attention_heads + model.query_groups) // tp, model.head_dim)}
    if base in ("input_norm", "mlp_norm", "final_norm", "mtp_final_norm", "mtp_enorm", "mtp_hnorm") or base in widths:
        rows, width = widths.get(base, (te, h))
        ln = model.normalization == "LayerNorm" and base not in widths
        inputs = [r(rows, width), torch.ones(width, device=ctx.device, dtype=act)]
        if ln:
            inputs.append(torch.zeros(width, device=ctx.device, dtype=act))
            return _Fwd(lambda x, w, b_: K.norm(x, w, b_, "LayerNorm"), inputs, [0, 1, 2], rows * width, "norm")
        return _Fwd(lambda x, w: K.norm(x, w, None, "RMSNorm"), inputs, [0, 1], rows * width, "norm")
    if base in ("attn_bias_dropout_add", "mlp_bias_dropout_add"):
        p = float(model.hidden_dropout)
        if bias_on:
            return _Fwd(lambda x, res, b_: K.bias_dropout_add(x, b_, res, p), [r(te, h), r(te, h), r(h)], [0, 1, 2],
                        te * h, "bias_dropout_add")
        return _Fwd(lambda x, res: K.bias_dropout_add(x, None, res, p), [r(te, h), r(te, h)], [0, 1], te * h,
                    "bias_dropout_add")
    if base == "rope":
        heads, groups, d = model.num_attention_heads // tp, model.query_groups // tp, model.head_dim
        if model.multi_latent_attention:  # decoupled RoPE part: every query head and the one shared key
            groups, d = 1, model.qk_pos_emb_head_dim
        seq = max(1, t // shard.micro_batch)
        cos, sin = K.rope_tables(seq, d, ctx.device, act)
        mb = shard.micro_batch
        q, k = r(mb, seq, heads, d), r(mb, seq, groups, d)
        return _Fwd(lambda q_, k_: (K.apply_rope(q_, cos, sin), K.apply_rope(k_, cos, sin)), [q, k], [0, 1],
                    mb * seq * (heads + groups) * d, "rope")
    for prefix in ("shared_expert", "expert", "mlp"):
        if base == f"{prefix}_swiglu":
            rows, ffn = _ffn(prefix, model, shard)
            if bias_on:
                return _Fwd(lambda x, b_: K.swiglu(x, b_), [r(rows, 2 * ffn), r(2 * ffn)], [0, 1], rows * ffn,
                            "swiglu")
            return _Fwd(lambda x: K.swiglu(x), [r(rows, 2 * ffn)], [0], rows * ffn, "swiglu")
        if base == f"{prefix}_squared_relu":
            rows, ffn = _ffn(prefix, model, shard)
            if bias_on:
                return _Fwd(lambda x, b_: K.squared_relu(x + b_), [r(rows, ffn), r(ffn)], [0, 1], rows * ffn,
                            "bias_squared_relu")
            return _Fwd(lambda x: K.squared_relu(x), [r(rows, ffn)], [0], rows * ffn, "squared_relu")
        if base == f"{prefix}_bias_gelu":
            rows, ffn = _ffn(prefix, model, shard)
            if bias_on:
                return _Fwd(lambda x, b_: K.bias_gelu(x, b_), [r(rows, ffn), r(ffn)], [0, 1], rows * ffn, "bias_gelu")
            return _Fwd(lambda x: K.bias_gelu(x, None), [r(rows, ffn)], [0], rows * ffn, "bias_gelu")
    if base in ("softmax", "attn_dropout"):
        heads, s = model.num_attention_heads // tp, shard.seq
        n = shard.micro_batch * heads * s * s
        scores = r(shard.micro_batch * heads, s, s)
        if base == "attn_dropout":
            p = float(model.attention_dropout)
            return _Fwd(lambda x: F.dropout(x, p, True), [scores], [0], n, "dropout")
        mask = torch.ones(s, s, device=ctx.device, dtype=torch.bool).triu(1) if model.causal else None
        scale = 1.0 / math.sqrt(model.head_dim)
        return _Fwd(lambda x: K.scale_mask_softmax(x, scale, mask), [scores], [0], n, "softmax")
    if base == "embed_dropout":
        p = float(model.hidden_dropout)
        return _Fwd(lambda x: F.dropout(x, p, True), [r(te, h)], [0], te * h, "dropout")
    if base in ("embedding_lookup", "mtp_embedding_lookup"):
        v = model.padded_vocab_size(tp) // tp
        seq = max(1, t // shard.micro_batch)
        ids = torch.randint(0, v, (shard.micro_batch, seq), device=ctx.device)
        inputs = [r(v, h)]
        if model.position_embedding_type == "learned_absolute":
            inputs.append(r(seq, h))
            return _Fwd(lambda w, pos: K.embed(ids, w, pos), inputs, [0, 1], shard.micro_batch * seq * h,
                        "embedding")
        return _Fwd(lambda w: K.embed(ids, w, None), inputs, [0], shard.micro_batch * seq * h, "embedding")
    if base in ("cross_entropy", "mtp_cross_entropy"):
        v = model.padded_vocab_size(tp) // tp
        target = torch.randint(0, v, (t,), device=ctx.device)
        impl = shard.fusion.cross_entropy_impl
        losses = {"torch": K.cross_entropy, "torch_16bit": K.cross_entropy_16bit}
        loss = losses.get(impl, K.vocab_parallel_cross_entropy)
        return _Fwd(lambda x: loss(x, target), [r(t, v)], [0], t * v, f"cross_entropy_{impl}")
    if base == "qkv_split":  # Megatron's fused QKV output split into views: the backward concatenates
        heads, groups, d = model.num_attention_heads // tp, model.query_groups // tp, model.head_dim
        sizes = [heads * d, groups * d, groups * d]
        return _Fwd(lambda x: tuple(x.split(sizes, dim=-1)), [r(t, sum(sizes))], [0], t * sum(sizes), "qkv_split")
    if base.endswith("_bias"):  # a linear layer's bias: its backward is the bias gradient's reduction
        width = _biased_width(base[: -len("_bias")], model, shard)
        if width:
            rows = max(1, round(op.flops / width))
            return _Fwd(K.bias_add, [r(rows, width), r(width)], [1], rows * width, "bias")
    if base in ("moe_permute", "moe_unpermute"):
        local = t // tp  # the MoE layer sees the sequence-parallel tokens
        routed = local * model.moe_router_topk
        index = torch.randperm(routed, device=ctx.device) % local
        if base == "moe_permute":
            return _Fwd(lambda x: K.permute(x, index), [r(local, h)], [0], routed * h, "permute")
        probs = torch.rand(routed, device=ctx.device, dtype=act)
        return _Fwd(lambda y: K.unpermute(y, index, probs, local), [r(routed, h)], [0], routed * h, "unpermute")
    if base in ("moe_sort", "moe_unsort"):  # received rows regrouped by local expert (and back): a row gather
        rows = max(1, round(moe_expert_tokens(model, shard)[1]))
        order = torch.randperm(rows, device=ctx.device)
        return _Fwd(lambda x: K.permute(x, order), [r(rows, h)], [0], rows * h, "permute")
    if base == "router_topk":
        local, experts = t // tp, model.num_experts or 1
        k = min(model.moe_router_topk, experts)
        return _Fwd(lambda x: K.router_topk(x, k), [r(local, experts, dtype=torch.float32)], [0], local * experts,
                    "router_topk")
    if base == "fp8_cast" and hasattr(torch, "float8_e4m3fn"):
        recipe = shard.fp8_recipe or "delayed"
        n = round(op.bytes / recipe_cost(recipe).cast_bytes)
        cols = next(c for c in (128, 64, 32, 16, 8, 4, 2, 1) if n % c == 0)
        return _Fwd(lambda x: K.fp8_quantize(x, cols, recipe), [r(n)], [], n, f"fp8_cast_{recipe}")
    return None


def _elementwise(op: ComputeOp, ctx: OpContext) -> Built:
    base = op.name[: -len("_grad")] if op.phase == "bwd" and op.name.endswith("_grad") else op.name
    if base == "embedding":  # the backward of the lookup is named embedding_grad
        base = "embedding_lookup"
    quantize = base == "fp8_grad_cast"  # the output-gradient cast runs the forward quantize kernel in backward
    spec = _forward_spec("fp8_cast" if quantize else base, op, ctx)
    if spec is None or (op.phase == "bwd" and not spec.diff and not quantize):
        return _generic_copy(op, ctx)
    if op.phase == "fwd" or quantize:
        f, inputs = spec.f, spec.inputs
        return Built(lambda: f(*inputs), spec.kind, kind=spec.kind, elements=spec.elements)
    for i in spec.diff:
        spec.inputs[i].requires_grad_(True)
    out = spec.f(*spec.inputs)
    outs = out if isinstance(out, tuple) else (out,)
    grads = tuple(torch.ones_like(o) if o.dim() == 0 else torch.randn_like(o) for o in outs)
    diff = [spec.inputs[i] for i in spec.diff]
    return Built(lambda: torch.autograd.grad(outs, diff, grads, retain_graph=True), f"{spec.kind}_backward",
                 kind=spec.kind, elements=spec.elements)


def _generic_copy(op: ComputeOp, ctx: OpContext) -> Built:
    half = max(1, int(op.bytes) // 2)
    src = torch.empty(half, device=ctx.device, dtype=torch.uint8).random_(0, 255)
    dst = torch.empty_like(src)
    return Built(lambda: dst.copy_(src), "generic_copy")


# ---- optimizer ----------------------------------------------------------------------------------------------------
def layer_parameter_shapes(model: Model, shard: Shard) -> list[tuple[int, ...]]:
    """Shapes of the parameters of one dense layer on one tensor-parallel rank."""
    h, d, tp = model.hidden_size, model.head_dim, shard.tp
    heads, groups = model.num_attention_heads // tp, model.query_groups // tp
    ffn = model.ffn_size // tp
    up = 2 * ffn if model.swiglu else ffn
    shapes: list[tuple[int, ...]] = [((heads + 2 * groups) * d, h), (h, heads * d), (up, h), (h, ffn)]
    shapes += [(h,)] * (4 if model.normalization == "LayerNorm" else 2)
    if model.add_bias_linear:
        shapes += [((heads + 2 * groups) * d,), (h,), (up,), (h,)]
    return shapes


def build_optimizer_step(ctx: OpContext, dtype: str, shapes: list[tuple[int, ...]]) -> tuple[Built, int]:
    """Gradient clipping plus one AdamW step over parameters of ``shapes`` in ``dtype``; returns the parameter count.

    Fused AdamW where PyTorch supports it for the device (else the multi-tensor ``foreach`` one).
    """
    dt = K.torch_dtype(dtype)
    params = [torch.nn.Parameter(torch.randn(s, device=ctx.device, dtype=dt) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
        name = "adamw_fused"
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
        name = "adamw_foreach"

    def step() -> None:
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    return Built(step, f"clip_grad_norm+{name}"), sum(p.numel() for p in params)
