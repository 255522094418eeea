"""Memory traffic of the memory-bound kernels under a software stack: fused kernels vs PyTorch's eager chains.

One owner for the bytes per element (and kernel counts) of every elementwise op family, read by
:mod:`trainsim.workload.layers` (time) and :mod:`trainsim.workload.memory` (saved tensors). ``e`` is the activation
size in bytes (2 for 16-bit training). Each eager count is the sum over the kernels PyTorch launches for the
framework's code; a kernel reads its inputs once and writes its output once.

- **Norm** — fused (TE/Apex kernel, ``torch.nn.LayerNorm``'s native kernel): read ``e``, write ``e`` (backward: read
  the input and the gradient, write the gradient: ``3e``). Eager RMSNorm (``transformers.LlamaRMSNorm``:
  ``x.to(fp32)``, ``pow(2)``, ``mean``, ``rsqrt``, ``x * rsqrt``, ``.to(bf16)``, ``weight * x``): forward
  ``(e+4) + 8 + 4 + 8 + (4+e) + 2e = 28 + 4e``, 7 kernels; backward through the same graph ``52 + 9e``, 12 kernels.
  It keeps its fp32 input (``4``) and the normalised 16-bit tensor the weight multiplies (``e``) instead of the
  16-bit input (:func:`eager_norm_saved_bytes`).
  LayerNorm is always one native kernel in PyTorch, so only RMSNorm has an eager form.
- **Bias-GELU** — fused: ``2e`` forward, ``3e`` backward; eager bias add then GELU: ``4e`` and ``4e`` (2 kernels).
- **SwiGLU** — fused: read gate and up, write one (``3e``), backward ``5e``; eager ``silu(gate) * up``: ``5e``
  (2 kernels), backward ``9e`` (3 kernels).
- **Bias-dropout-add** — fused: read two, write one, a 1-byte mask when dropout runs; eager: bias add ``2e``
  (with bias), dropout ``2e + 1`` (with dropout), residual add ``3e``.
- **RoPE** (per element of Q and K) — fused ``2e`` both ways; eager ``q·cos + rotate_half(q)·sin`` (slice/neg,
  cat, two multiplies, add): ``11e`` both ways, 5 kernels.
- **Cross-entropy** (per logit) — unfused, Megatron's ``VocabParallelCrossEntropy`` on ``logits.float()``
  (``vocab_parallel``): upcast ``e + 4``, max ``4``, in-place subtract ``8``, exp ``8``, sum ``4``, in-place divide
  ``8`` forward (``e + 36``); in-place multiply ``8`` and downcast ``4 + e`` backward (``12 + e``). The Megatron
  local-spec trace of ``shared/data/gpu-h100/traces`` runs exactly these kernels, 40.6 and 14.5 bytes per logit
  at 2.68 TB/s. Unfused ``torch``: ``logits.float()`` then ``F.cross_entropy`` (transformers, torchtitan):
  upcast ``e + 4`` and ``log_softmax`` (three reads of the row and a write: ``16``) forward (``e + 20``); the
  gradient's zero fill ``4``, ``log_softmax`` backward ``16`` and downcast ``4 + e`` (``24 + e``) — the
  transformers trace there (split in two kernels each past 2³¹ bytes) measures 22.5 and 23 bytes per logit.
  Fused (TE / Megatron ``--cross-entropy-loss-fusion``, torch.compile): read the logits (``e``) forward, write
  their gradient (``2e``) backward. Memory at the loss's peak, per logit: ``torch`` ``12`` — the saved fp32
  ``log_softmax`` output, ``nll_loss``'s fp32 gradient and ``log_softmax``'s fp32 input gradient, live together in
  backward (the 16-bit logits are dead by then: transformers' Trainer keeps only the loss, torchtitan deletes
  ``pred``; the forward's ``e + 8`` is lower); ``vocab_parallel`` ``4 + e`` — Megatron turns the fp32 copy into
  the softmax in place, saves it and writes the gradient into it, so the fp32 tensor and the 16-bit logits (or
  their 16-bit gradient) are all it holds; fused ``2e``. ``torch_16bit`` (``F.cross_entropy`` on the 16-bit logits,
  no upcast: NeMo AutoModel's ``MaskedCrossEntropy(fp32_upcast=False)``): ``log_softmax`` ``4e`` forward, zero fill
  and ``log_softmax`` backward ``5e``; at the peak the three tensors of the ``torch`` case in 16 bits, ``3e``.
  Single-H100 steps measured in fresh processes
  (``trainsim/data/gpu-h100``): a 0.6B Llama with a 152k vocabulary peaks at 57.7 GB, 12 B per logit leaves
  the layers what they save.
- **Bias gradients** (per output element of a linear layer with a bias) — outside Transformer Engine (whose GEMMs
  produce the bias gradient in the cuBLASLt ``BGRADB`` epilogue) and torch.compile, each bias gradient is its own
  reduction over the tokens (``grad_output.sum(0)`` in Megatron's linear layers and in autograd's
  broadcast-add backward): read ``e``. The Megatron local-spec trace runs four per layer (QKV, projection, fc1,
  fc2), 1.8 TB/s on the 302 MB of a 1.3B layer's output gradients.
- **QKV split** (Megatron's fused QKV projection, ``module_layout: megatron``): query, key and value are views of one
  GEMM output, so the backward concatenates their gradients into the fused gradient (autograd's split backward,
  ``aten::cat``): read ``e`` and write ``e`` per element (the local-spec trace: 226 µs per layer of a 1.3B model,
  one ``CatArrayBatchedCopy`` on 201 MB). Outside Transformer Engine (whose linear adds the bias in its GEMM),
  Megatron's own linear layer adds the QKV bias in a kernel of its own (``torch.matmul`` then ``+ bias``: ``2e``
  forward; the trace's ``aten::add`` of ``[s, b, 3h]`` and ``[3h]``); its other linears hand the bias to the fused
  bias-GELU / bias-dropout-add.
- **Softmax on the s² scores** (the non-flash attention paths, per score element) — fused scale-mask-softmax kernel
  on 16-bit scores: ``2e`` forward, ``3e`` backward; saves the 16-bit probabilities (``e``). Eager fp32 chain
  (Megatron ``FusedScaleMaskSoftmax.forward_torch_softmax``: ``.float()``, ``masked_fill_``, ``softmax``, downcast):
  forward ``(e+4) + 9 + 8 + (4+e) = 25 + 2e`` (upcast, in-place ``masked_fill_`` with a 1-byte mask, softmax,
  downcast), backward ``(e+4) + 12 + 12 + 9 + 8 + (4+e) = 49 + 2e`` (upcast of the gradient, an fp32 binary
  kernel, softmax backward, masked-fill backward, a device-to-device fp32 copy, downcast). Every one of these
  kernels appears once per layer and micro-batch in the Megatron local-spec trace of ``shared/data/gpu-h100/traces``
  (their measured durations equal 81.5 bytes per score element at 2.68 TB/s; this model counts 82); saves the
  fp32 probabilities and their 16-bit copy (``4 + e``: 6 B).
  Attention dropout adds ``2e + 1`` each way and a 1-byte mask plus its ``e``-byte output.
- **Materialised causal mask** (``compiled_causal_mask: materialized``: transformers' ``_ignore_causal_mask_sdpa``
  refuses to drop the mask while torch.compile traces, so SDPA gets a boolean ``(b, 1, s, s)`` mask instead of
  ``is_causal``): the flash kernel cannot skip the masked blocks (full, non-causal FLOPs) and the masked kernels run
  at :func:`masked_attention_efficiency` of the unmasked kernel's throughput (measured on one H100,
  ``trainsim/data/gpu-h100/sdpa_mask.csv``; the compiled transformers Llama trace of the same project spends 3x the
  eager step's time in attention).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from trainsim.spec.training import grad_element_bytes
from trainsim.workload.memo import per_job

if TYPE_CHECKING:
    from trainsim.spec.job import Job


@dataclass(frozen=True, slots=True)
class Fusion:
    """Which elementwise ops the stack fuses (from :class:`~trainsim.spec.framework.Framework`)."""

    norm: bool = True
    bias_activation: bool = True
    bias_dropout_add: bool = True
    rope: bool = True
    cross_entropy: bool = False
    cross_entropy_impl: str = "vocab_parallel"  # the unfused loss's kernels (Framework.cross_entropy_impl)
    bias_in_gemm: bool = True  # the GEMM adds the bias and reduces its gradient (TE's cuBLASLt epilogues, compiled)
    qkv_split: bool = False  # one fused QKV GEMM split into views: the backward concatenates the three gradients
    dropout: bool = True
    grad_accumulation: bool = True  # wgrad GEMMs accumulate into main_grad (no separate add per micro-batch)
    grads_fp32: bool = True  # gradient accumulation buffer in fp32 (else the parameter dtype)
    grad_copy_fp32: bool = False  # every backward's 16-bit gradients cast, then added into an fp32 buffer
    # (DeepSpeed BF16_Optimizer.update_hp_grads: hp_grad.add_(lp.grad.to(fp32)), two kernels per tensor)
    metric_passes: int = 0  # forward-only cross-entropy passes over the logits for training metrics
    masked_attention: bool = False  # SDPA gets an explicit causal mask tensor (no block skipping, masked kernels)
    attention_output_copy: bool = False  # transformers layout: SDPA's saved [b, a, s, d] output and its contiguous
    # [b, s, a·d] copy for the output projection are two tensors
    compiled: bool = False  # torch.compile: Inductor fuses any elementwise chain (squared ReLU included)


DEFAULT_FUSION = Fusion()


@per_job
def fusion_of(job: Job) -> Fusion:
    """The :class:`Fusion` of a job's resolved framework."""
    fw = job.framework
    compiled = fw.torch_compile  # torch.compile fuses the elementwise chains (Inductor's Triton kernels)
    grads_fp32 = bool(job.training.grads_in_fp32)
    return Fusion(norm=fw.fused_norm or compiled, bias_activation=fw.fused_bias_activation or compiled,
                  bias_dropout_add=fw.fused_bias_dropout_add or compiled, rope=fw.fused_rope or compiled,
                  cross_entropy=fw.fused_cross_entropy or compiled, cross_entropy_impl=fw.cross_entropy_impl,
                  bias_in_gemm=fw.transformer_impl == "transformer_engine" or compiled,
                  qkv_split=fw.module_layout == "megatron" and not compiled, dropout=fw.dropout,
                  grad_accumulation=fw.gradient_accumulation_fusion and (
                      grads_fp32 or not fw.gradient_accumulation_fusion_fp32_only),
                  grads_fp32=grads_fp32, grad_copy_fp32=job.bf16_optimizer, metric_passes=fw.train_metric_passes or 0,
                  masked_attention=compiled and fw.compiled_causal_mask == "materialized"
                  and job.model.causal,
                  attention_output_copy=fw.attention_layout == "bhsd", compiled=compiled)


#: Measured fwd+bwd SDPA times with ``is_causal``, no mask and an explicit boolean causal mask (one H100).
SDPA_MASK_TABLE = ("data", "gpu-h100", "sdpa_mask.csv")


@cache
def masked_attention_efficiency() -> float:
    """Throughput of SDPA with an explicit boolean mask relative to the unmasked (non-causal) kernel of the same
    shape: the median over the measured shapes of ``time(no mask) / time(bool mask)`` (0.57 on the H100, six
    shapes within 0.54-0.66)."""
    text = resources.files("trainsim").joinpath(*SDPA_MASK_TABLE).read_text()
    times: dict[tuple[str, ...], dict[str, float]] = {}
    for r in csv.DictReader(text.splitlines()):
        times.setdefault((r["b"], r["heads"], r["seq"], r["head_dim"]), {})[r["mode"]] = float(r["fwd_bwd_s"])
    return statistics.median(t["none"] / t["bool-mask"] for t in times.values() if {"none", "bool-mask"} <= set(t))


def norm_bytes(f: Fusion, e: float, rms: bool) -> tuple[float, float]:
    """(forward, backward) bytes per element of a norm."""
    if f.norm or not rms:
        return 2 * e, 3 * e
    return 28 + 4 * e, 52 + 9 * e


def activation_bytes(f: Fusion, e: float, activation: str, bias: bool) -> tuple[float, float]:
    """(forward, backward) bytes per FFN element of the activation (bias-GELU, SwiGLU or squared ReLU).

    Squared ReLU (``relu(x)²``, Nemotron-4) has no fused kernel in Megatron-Core (``mlp.py``: bias-activation
    fusion only for GELU and SwiGLU; ``activations.py`` ``squared_relu = torch.pow(F.relu(x), 2)``): two eager
    kernels forward (``relu``, ``pow``: read and write each, 4 bytes-per-element passes) and their two backward
    kernels (``pow`` backward reads the gradient and the saved ReLU output and writes, ``relu`` backward likewise:
    6), a bias its own eager add; one kernel each way only where torch.compile fuses the chain."""
    if activation == "swiglu":
        return (3 * e, 5 * e) if f.bias_activation else (5 * e, 9 * e)
    if activation == "squared_relu" and not f.compiled:  # the bias (Megatron adds it after fc1) its own add
        return 4 * e + (2 * e if bias else 0.0), 6 * e
    if f.bias_activation or not bias:
        return 2 * e, 3 * e
    return 4 * e, 4 * e


def dropout_add_bytes(f: Fusion, e: float, bias: bool, dropout: bool) -> tuple[float, float]:
    """(forward, backward) bytes per hidden element of bias + dropout + residual add."""
    drop = dropout and f.dropout
    if f.bias_dropout_add:
        b = 3 * e + (1 if drop else 0)
        return b, b
    b = 3 * e + (2 * e if bias else 0) + (2 * e + 1 if drop else 0)
    return b, b


def rope_bytes(f: Fusion, e: float) -> tuple[float, float]:
    """(forward, backward) bytes per element of Q and K."""
    return (2 * e, 2 * e) if f.rope else (11 * e, 11 * e)


def cross_entropy_bytes(f: Fusion, e: float) -> tuple[float, float]:
    """(forward, backward) bytes per logit."""
    if f.cross_entropy:
        return e, 2 * e
    if f.cross_entropy_impl == "torch_16bit":
        return 4 * e, 5 * e
    return _torch_cross_entropy_bytes(e) if f.cross_entropy_impl == "torch" else (e + 36, 12 + e)


def _torch_cross_entropy_bytes(e: float) -> tuple[float, float]:
    """``F.cross_entropy`` on upcast logits (module docstring): forward ``e + 20``, backward ``24 + e``."""
    return e + 20, 24 + e


def qkv_split_grad_bytes(f: Fusion, e: float) -> float:
    """Bytes per QKV output element to concatenate the query, key and value gradients (0 without a fused QKV)."""
    return 2 * e if f.qkv_split else 0.0


def qkv_bias_add_bytes(f: Fusion, e: float) -> float:
    """Bytes per QKV output element of Megatron's own bias add after the QKV GEMM (0 when the GEMM adds it)."""
    return 2 * e if f.qkv_split and not f.bias_in_gemm else 0.0


def bias_grad_bytes(f: Fusion, e: float) -> float:
    """Bytes per output element to reduce a linear layer's bias gradient (0 when the GEMM produces it)."""
    return 0.0 if f.bias_in_gemm else e


def metric_bytes(f: Fusion, e: float) -> float:
    """Bytes per logit of the training metrics' forward-only cross-entropy passes (each the unfused ``torch``
    forward under autocast: upcast and ``log_softmax``)."""
    return f.metric_passes * _torch_cross_entropy_bytes(e)[0]


def logits_memory_bytes(f: Fusion, e: float) -> float:
    """Bytes per logit held at the loss's peak (see the module docstring)."""
    if f.cross_entropy:
        return 2 * e
    if f.cross_entropy_impl == "torch_16bit":
        return 3 * e
    return 4 + e if f.cross_entropy_impl == "vocab_parallel" else 12.0


def eager_norm_saved_bytes(f: Fusion, rms: bool) -> float:
    """Bytes per element an eager RMSNorm keeps beyond a fused norm (which keeps its 16-bit input): the fp32 upcast
    of its input (saved by ``pow`` and the normalising multiply) and the normalised 16-bit tensor (saved by the
    weight multiply) instead of the 16-bit input: ``4``. 0 for fused norms and LayerNorm (one native kernel)."""
    return 4.0 if rms and not f.norm else 0.0


def softmax_bytes(path: str, e: float) -> tuple[float, float]:
    """(forward, backward) bytes per score element of the softmax on the s² path (``unfused`` or ``eager``)."""
    return (25 + 2 * e, 49 + 2 * e) if path == "eager" else (2 * e, 3 * e)


def softmax_saved_bytes(path: str, e: float) -> float:
    """Bytes per score element the softmax keeps for its backward."""
    return 4 + e if path == "eager" else e


def grad_accumulation_bytes(f: Fusion, param_bytes: float) -> float:
    """Bytes per local parameter per micro-batch to add the weight gradient into the accumulation buffer when the
    GEMM does not accumulate itself (Megatron without gradient-accumulation fusion: ``main_grad.add_(grad)``;
    autograd's ``AccumulateGrad`` in the parameter dtype). DeepSpeed's ``BF16_Optimizer`` frees the 16-bit gradients
    before every backward and afterwards casts each to fp32 (read it, write 4 bytes) and adds that into its fp32
    buffer (read 4 + 4, write 4), whatever the fusion."""
    if f.grad_copy_fp32:
        return param_bytes + 4.0 + 3 * 4.0
    if f.grad_accumulation:
        return 0.0
    g = grad_element_bytes(f.grads_fp32, param_bytes)
    return param_bytes + 2 * g
