"""Which flash-attention kernel library a stack runs, and what it costs on each GPU generation.

trainsim's Hopper attention surface is measured with cuDNN's fused attention (PyTorch 2.11 SDPA on one H100,
:mod:`trainsim.cost.kernel_surfaces`), and Blackwell inherits its large-kernel efficiency. Transformer Engine picks
cuDNN on Hopper and newer, but many stacks run FlashAttention-2 there (``flash-attn`` 2.x, or PyTorch's SDPA
"flash" backend, which is the same kernel): it issues Ampere's ``mma.sync`` instructions, not Hopper's ``wgmma``,
and reaches 0.55-0.77 of trainsim's measured cuDNN throughput at head dimension 128 (``trainsim/data/kernels``:
FlashAttention-2's level in the FlashAttention-3 paper's H100 kernel benchmark, against trainsim's own cuDNN surface
at the same shapes; :func:`fa2_curves`). :func:`flash_kernel_factor` is that relative throughput for an op's kernel
library (:attr:`~trainsim.workload.ops.ComputeOp.kernel`), sequence length and mask on a GPU generation; both the
analytic roofline and the measured surface multiply the attention efficiency by it. Ampere is calibrated on the
stacks of its own era, whatever their library, so the factor is 1 there.

Kernel libraries (``Framework.flash_kernel``):

- ``cudnn``: cuDNN fused attention (Transformer Engine on Hopper+, PyTorch >= 2.11 SDPA on sm90/sm100);
- ``fa3``: FlashAttention-3 (Hopper kernels; at least cuDNN's throughput in the same benchmark, priced as cuDNN);
- ``fa2``: FlashAttention-2 on every GPU;
- ``fa1``: FlashAttention-1's algorithm (flash-attn 1.x and its Triton port ``flash_attn_triton.py``, which
  llm-foundry's ``attn_impl: triton`` runs): FlashAttention-2 is "around 2x faster" (T. Dao, *FlashAttention-2:
  Faster Attention with Better Parallelism and Work Partitioning*, ICLR 2024, arXiv:2307.08691, abstract), so
  :data:`FA1_OVER_FA2` of the FlashAttention-2 price on Hopper and Blackwell; on the A100, where the same paper gives
  FlashAttention-1's absolute level ("only 25-40% of the theoretical maximum FLOPs/s"), the midpoint of that range,
  :data:`FA1_AMPERE_EFFICIENCY`, forward and backward alike (:func:`flash_kernel_efficiency`);
- ``cudnn-blackwell``: cuDNN from Blackwell on, FlashAttention-2 before (torchtitan's SDPA backend list).
"""

from __future__ import annotations

import csv
import math
import re
from functools import cache
from importlib import resources

import numpy as np

from trainsim.spec.framework import FlashKernel

#: GPU generations whose tensor cores FlashAttention-2 cannot drive at full rate (wgmma / tcgen05 parts).
ASYNC_MMA_GENERATIONS = frozenset({"hopper", "blackwell"})
#: GPU generations no flash kernel library runs on: FlashAttention-2 and -3 and cuDNN's fused attention need sm80
#: (Ampere) or newer; PyTorch's SDPA falls back to its memory-efficient kernel there, Transformer Engine to its
#: unfused attention.
NO_FLASH_GENERATIONS = frozenset({"volta"})
TABLE = ("data", "kernels", "flash-attention-h100.csv")
#: FlashAttention-1's throughput relative to FlashAttention-2's ("around 2x speedup compared to FlashAttention",
#: arXiv:2307.08691 abstract): the same mma.sync instructions, without FlashAttention-2's work partitioning.
FA1_OVER_FA2 = 0.5
#: FlashAttention-1's efficiency on the A100, forward and backward: "reaching only 25-40% of the theoretical maximum
#: FLOPs/s" (arXiv:2307.08691 abstract), the midpoint.
FA1_AMPERE_EFFICIENCY = 0.325


#: The benchmark's shapes: batch · sequence = 16k tokens, hidden 2,048 (heads = 2,048 / head dimension).
BENCHMARK_TOKENS = 16384
BENCHMARK_HIDDEN = 2048


@cache
def benchmark_rows() -> tuple[tuple[int, bool, int, float, float], ...]:
    """(head_dim, causal, seq, FlashAttention-2 FLOP/s, cuDNN FLOP/s) of the packaged benchmark."""
    text = resources.files("trainsim").joinpath(*TABLE).read_text()
    return tuple((int(r["head_dim"]), r["causal"].strip().lower() == "true", int(r["seq"]),
                  float(r["fa2_tflops"]) * 1e12, float(r["cudnn_tflops"]) * 1e12)
                 for r in csv.DictReader(text.splitlines()))


def _modelled_cudnn(head_dim: int, causal: bool, seq: int) -> float | None:
    """FLOP/s of trainsim's measured (cuDNN) H100 attention surface at a benchmark shape, or None."""
    from trainsim.cost.kernel_surfaces import packaged_surface  # imports this module: resolved at call time
    from trainsim.workload.ops import attention

    surface = packaged_surface()
    if surface is None:
        return None
    op = attention("flash_attn", "fwd", max(1, BENCHMARK_TOKENS // seq), max(1, BENCHMARK_HIDDEN // head_dim), seq,
                   seq, head_dim, causal)
    return surface.throughput(op)


@cache
def fa2_curves() -> dict[tuple[int, bool], tuple[tuple[float, float], ...]]:
    """(head_dim, causal) -> ((ln seq, FlashAttention-2's throughput relative to trainsim's modelled cuDNN kernel at
    the benchmark's shape), ...) ascending in sequence length.

    The numerator is the benchmark's FlashAttention-2, the denominator trainsim's own measured cuDNN surface at the
    same shape, not the paper's cuDNN: the surface was measured with a later cuDNN (PyTorch 2.11), up to ~20 %
    faster than the paper's at long sequences, while FlashAttention-2's kernel is unchanged. An ``fa2`` kernel so
    costs the benchmark's FlashAttention-2 level at the benchmark's shapes (above 1 where the surface's short kernels
    are bound by their launch latency: head dimension 64, causal, 512 tokens). A head dimension the surface did not
    measure keeps the paper's own FlashAttention-2 / cuDNN ratio."""
    curves: dict[tuple[int, bool], list[tuple[float, float]]] = {}
    for d, causal, seq, fa2, cudnn in benchmark_rows():
        ref = _modelled_cudnn(d, causal, seq)
        curves.setdefault((d, causal), []).append((math.log(seq), fa2 / (ref if ref else cudnn)))
    return {k: tuple(sorted(v)) for k, v in curves.items()}


@cache
def fa2_ratio(head_dim: int, seq: int = BENCHMARK_TOKENS, causal: bool = True) -> float:
    """FlashAttention-2's throughput relative to the modelled cuDNN kernel on Hopper (:func:`fa2_curves`) for a
    ``seq``-key attention of ``head_dim`` with or without the causal mask: along the sequence (log scale) at each
    benchmarked head dimension, linear between head dimensions, the nearest outside them (``numpy.interp``)."""
    curves = fa2_curves()
    dims = sorted({d for d, _ in curves})
    x = math.log(max(seq, 1))
    at = [float(np.interp(x, [p[0] for p in curves[(d, causal)]], [p[1] for p in curves[(d, causal)]]))
          for d in dims]
    return float(np.interp(head_dim, dims, at))


def runs_fa2(kernel: FlashKernel | str, generation: str) -> bool:
    """Whether a stack with this flash-kernel library runs FlashAttention-2 on a GPU of ``generation``."""
    if kernel == "fa2":
        return True
    return kernel == "cudnn-blackwell" and generation != "blackwell"


@cache
def flash_kernel_factor(kernel: str, generation: str, head_dim: int, seq: int = BENCHMARK_TOKENS,
                        causal: bool = True) -> float:
    """Throughput of the stack's flash kernel relative to the modelled one (cuDNN on Hopper and newer, the
    calibrated kernel on older GPUs) for a ``seq``-key attention: :func:`fa2_ratio` where FlashAttention-2 runs on a
    Hopper or Blackwell part, :data:`FA1_OVER_FA2` of that for FlashAttention-1, else 1 (FlashAttention-1 on older
    GPUs has its own absolute efficiency, :func:`flash_kernel_efficiency`)."""
    if generation in ASYNC_MMA_GENERATIONS:
        if kernel == "fa1":
            return FA1_OVER_FA2 * fa2_ratio(head_dim, seq, causal)
        if runs_fa2(kernel, generation):
            return fa2_ratio(head_dim, seq, causal)
    return 1.0


def flash_kernel_efficiency(kernel: str, generation: str) -> float | None:
    """The documented efficiency (fraction of the 16-bit peak, forward and backward) of a kernel library on a GPU
    generation where it replaces the modelled flash kernel outright: FlashAttention-1 on Ampere
    (:data:`FA1_AMPERE_EFFICIENCY`); ``None`` elsewhere (the library is priced by :func:`flash_kernel_factor`)."""
    if kernel == "fa1" and generation not in ASYNC_MMA_GENERATIONS:
        return FA1_AMPERE_EFFICIENCY
    return None


#: The first PyTorch release whose bundled cuDNN (> 9.15) makes SDPA prefer cuDNN attention on sm90/sm100.
SDPA_CUDNN_TORCH = (2, 11)
#: The first PyTorch release whose SDPA flash backend is FlashAttention-2 (release notes of 2.2: "SDPA now supports
#: FlashAttention-2, yielding around 2x speedups compared to previous versions"); 2.0 and 2.1 ran FlashAttention-1.
SDPA_FA2_TORCH = (2, 2)


def sdpa_kernel(torch_version: str) -> FlashKernel:
    """The kernel library PyTorch's ``scaled_dot_product_attention`` runs on Hopper for ``torch_version`` (text
    such as ``"2.11.0+cu130"`` or ``"PyTorch 2.5.1"``): cuDNN from :data:`SDPA_CUDNN_TORCH` on (aten
    ``sdp_utils.cpp`` ``check_prefer_cudnn_attention``), its flash backend before: FlashAttention-2 from
    :data:`SDPA_FA2_TORCH`, FlashAttention-1 in 2.0 and 2.1 (the first releases with SDPA)."""
    m = re.search(r"(\d+)\.(\d+)", torch_version)
    if m is None:
        raise ValueError(f"torch version: cannot read {torch_version!r}; give it as MAJOR.MINOR, e.g. 2.11")
    version = (int(m.group(1)), int(m.group(2)))
    if version >= SDPA_CUDNN_TORCH:
        return "cudnn"
    return "fa2" if version >= SDPA_FA2_TORCH else "fa1"
