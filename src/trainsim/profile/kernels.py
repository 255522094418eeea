"""PyTorch implementations of the operators of a transformer layer.

The profiler's builders time these functions, and ``benchmarks/validate_single_gpu.py`` builds its GPT from them, so a
validated model runs the very kernels that were profiled. They follow Megatron-LM's structure: the bias of the
row-parallel projections is added in the fused bias-dropout-add, the bias of FC1 in the bias-GeLU / SwiGLU, norms are
LayerNorm or RMSNorm, RoPE is the rotate-half form, and the loss is cross-entropy on fp32 logits. Eager PyTorch runs
each line as its own kernel where Megatron fuses them; that difference is what a measured table captures.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

TORCH_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
}


def torch_dtype(dtype: str) -> torch.dtype:
    """The tensor type of a trainsim data type (FP8 GEMM operands are cast separately; activations stay bf16)."""
    return TORCH_DTYPES.get(dtype, torch.bfloat16)


def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, kind: str,
         eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm or RMSNorm over the last dimension."""
    if kind == "RMSNorm":
        if hasattr(F, "rms_norm"):  # PyTorch 2.4+
            return F.rms_norm(x, (x.shape[-1],), weight, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def bias_dropout_add(x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float,
                     training: bool = True) -> torch.Tensor:
    """``residual + dropout(x + bias)`` (Megatron's bias-dropout-add after a row-parallel linear)."""
    if bias is not None:
        x = x + bias
    return residual + F.dropout(x, p, training)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``gelu(x + bias)`` with the tanh approximation, as Megatron's fused bias-GeLU."""
    if bias is not None:
        x = x + bias
    return F.gelu(x, approximate="tanh")


def squared_relu(x: torch.Tensor) -> torch.Tensor:
    """``relu(x)²`` as Megatron-Core's ``squared_relu`` runs it (two eager kernels, Nemotron-4)."""
    return torch.pow(F.relu(x), 2)


def swiglu(x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(a) * b`` for ``x = [a, b]`` split on the last dimension (bias added first when given)."""
    if bias is not None:
        x = x + bias
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b


def rope_tables(positions: int, head_dim: int, device: torch.device, dtype: torch.dtype,
                base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of shape ``[positions, 1, head_dim]`` for rotate-half RoPE."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inv)
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on ``x[..., positions, heads, head_dim]``."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, dropout_p: float = 0.0
              ) -> torch.Tensor:
    """Fused attention on ``[batch, heads, seq, head_dim]`` tensors (PyTorch SDPA: FlashAttention where it can)."""
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)


def scale_mask_softmax(scores: torch.Tensor, scale: float, mask: torch.Tensor | None) -> torch.Tensor:
    """Unfused attention's softmax of scaled scores, masked positions set to ``-inf`` first."""
    x = scores * scale
    if mask is not None:
        x = x.masked_fill(mask, float("-inf"))
    return torch.softmax(x, dim=-1)


def embed(ids: torch.Tensor, word: torch.Tensor, position: torch.Tensor | None) -> torch.Tensor:
    """Token embedding of ``ids[batch, seq]`` plus learned absolute positions ``position[seq, hidden]``."""
    x = F.embedding(ids, word)
    if position is not None:
        x = x + position
    return x


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits[tokens, vocab]`` computed in fp32 (``F.cross_entropy``: transformers,
    torchtitan)."""
    return F.cross_entropy(logits.float(), target)


def cross_entropy_16bit(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits[tokens, vocab]`` on the 16-bit logits, no upcast (NeMo AutoModel's
    ``MaskedCrossEntropy(fp32_upcast=False)``)."""
    return F.cross_entropy(logits, target)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's ``VocabParallelCrossEntropy`` on one rank (no TP reductions): the same in-place fp32 kernels."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x = logits.float()
        x -= x.max(dim=-1)[0].unsqueeze(-1)
        predicted = x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        torch.exp(x, out=x)
        total = x.sum(dim=-1)
        loss = torch.log(total) - predicted
        x.div_(total.unsqueeze(-1))
        ctx.save_for_backward(x, target)
        ctx.dtype = logits.dtype
        return loss.mean()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        softmax, target = ctx.saved_tensors
        scale = grad / softmax.shape[0]
        rows = torch.arange(softmax.shape[0], device=softmax.device)
        # Megatron subtracts and multiplies in place; out of place here (the same bytes) so that the profiler can
        # run the backward repeatedly
        out = softmax * scale
        out[rows, target] -= scale
        return out.to(ctx.dtype), None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits[tokens, vocab]`` as Megatron computes it (upcast, max, subtract, exp, sum,
    divide; backward multiply and downcast)."""
    out: torch.Tensor = _VocabParallelCrossEntropy.apply(logits, target)
    return out


def bias_add(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A linear layer's bias added to its output (backward: the bias gradient's reduction over the rows)."""
    return x + bias


def permute(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """MoE dispatch inside a GPU: token copies gathered in expert order."""
    return x.index_select(0, index)


def unpermute(y: torch.Tensor, index: torch.Tensor, probs: torch.Tensor, tokens: int) -> torch.Tensor:
    """MoE combine inside a GPU: expert outputs weighted by their router probability and summed per token."""
    out = torch.zeros(tokens, y.shape[-1], device=y.device, dtype=y.dtype)
    return out.index_add(0, index, y * probs[:, None])


def router_topk(logits: torch.Tensor, k: int) -> torch.Tensor:
    """MoE router after its GEMM: fp32 softmax over the experts, top-k, renormalised routing weights scattered back
    into a dense ``[tokens, experts]`` map (what the permutation and the load-balancing loss read)."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, index = torch.topk(probs, k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(1, index, weights)


def fp8_quantize(x: torch.Tensor, cols: int, recipe: str) -> tuple[torch.Tensor, ...]:
    """Quantize a GEMM input to E4M3 as the FP8 ``recipe`` does (row-wise and column-wise copies)."""
    e4m3 = torch.float8_e4m3fn
    m = x.view(-1, cols)
    if recipe in ("delayed", "tensorwise"):
        scale = 448.0 / m.abs().amax().clamp(min=1e-12) if recipe == "tensorwise" else 1.0
        return (m * scale).to(e4m3), (m.t() * scale).contiguous().to(e4m3)
    block = 32 if recipe == "mxfp8" else 128

    def blocks(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = v.reshape(-1)
        flat = torch.nn.functional.pad(flat, (0, (-flat.numel()) % block)).view(-1, block)
        scale = 448.0 / flat.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
        return (flat * scale).to(e4m3), scale

    return (*blocks(m), *blocks(m.t().contiguous()))
