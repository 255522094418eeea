"""Which flash-attention kernel library a stack runs, and what it costs on each GPU generation.

trainsim's Hopper attention surface is measured with cuDNN's fused attention (PyTorch 2.11 SDPA on one H100,
:mod:`trainsim.cost.kernel_surfaces`), and Blackwell inherits its large-kernel efficiency. Transformer Engine picks
cuDNN on Hopper and newer, but many stacks run FlashAttention-2 there (``flash-attn`` 2.x, or PyTorch's SDPA
"flash" backend, which is the same kernel): it issues Ampere's ``mma.sync`` instructions, not Hopper's ``wgmma``,
and reaches about 0.6 of cuDNN's throughput at head dimension 128 (``trainsim/data/kernels``: the FlashAttention-3
paper's H100 kernel benchmark, ratio only). :func:`flash_kernel_factor` is that relative throughput for an op's
kernel library (:attr:`~trainsim.workload.ops.ComputeOp.kernel`) on a GPU generation; both the analytic roofline
and the measured surface multiply the attention efficiency by it. Ampere is calibrated on the stacks of its own
era, whatever their library, so the factor is 1 there.

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
import re
import statistics
from functools import cache
from importlib import resources
from itertools import pairwise

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


@cache
def fa2_ratios() -> tuple[tuple[int, float], ...]:
    """FlashAttention-2 / cuDNN forward throughput on the H100 per head dimension (median over the benchmark's
    sequence lengths and masks), ascending by head dimension."""
    text = resources.files("trainsim").joinpath(*TABLE).read_text()
    by_dim: dict[int, list[float]] = {}
    for r in csv.DictReader(text.splitlines()):
        by_dim.setdefault(int(r["head_dim"]), []).append(float(r["fa2_tflops"]) / float(r["cudnn_tflops"]))
    return tuple((d, statistics.median(v)) for d, v in sorted(by_dim.items()))


def fa2_ratio(head_dim: int) -> float:
    """FlashAttention-2's throughput relative to cuDNN's at ``head_dim`` on Hopper: linear between the measured
    head dimensions, the nearest one outside them."""
    points = fa2_ratios()
    if head_dim <= points[0][0]:
        return points[0][1]
    for (d0, r0), (d1, r1) in pairwise(points):
        if head_dim <= d1:
            return r0 + (r1 - r0) * (head_dim - d0) / (d1 - d0)
    return points[-1][1]


def runs_fa2(kernel: FlashKernel | str, generation: str) -> bool:
    """Whether a stack with this flash-kernel library runs FlashAttention-2 on a GPU of ``generation``."""
    if kernel == "fa2":
        return True
    return kernel == "cudnn-blackwell" and generation != "blackwell"


@cache
def flash_kernel_factor(kernel: str, generation: str, head_dim: int) -> float:
    """Throughput of the stack's flash kernel relative to the modelled one (cuDNN on Hopper and newer, the
    calibrated kernel on older GPUs): :func:`fa2_ratio` where FlashAttention-2 runs on a Hopper or Blackwell part,
    :data:`FA1_OVER_FA2` of that for FlashAttention-1, else 1 (FlashAttention-1 on older GPUs has its own absolute
    efficiency, :func:`flash_kernel_efficiency`)."""
    if generation in ASYNC_MMA_GENERATIONS:
        if kernel == "fa1":
            return FA1_OVER_FA2 * fa2_ratio(head_dim)
        if runs_fa2(kernel, generation):
            return fa2_ratio(head_dim)
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
