"""Compute cost of one operator: roofline with a shape-aware GEMM efficiency.

- GEMMs: ``time = max(FLOPs / (peak · η), bytes / (HBM · η_mem))``. ``η`` is the generation's large-GEMM efficiency
  times a shape factor: the best cuBLAS-like tile choice under *tile quantization* (partial tiles at the matrix edges)
  and *wave quantization* (the last wave of tiles leaves SMs idle), with smaller tiles running slightly slower, and a
  short-``k`` penalty ``k / (k + 64)`` for the prologue/epilogue of each tile.
- FlashAttention: FLOPs (causal half skipped) at the generation's attention efficiency, scaled by wave quantization of
  128-row query tiles and by head size (smaller heads use the tensor cores less well); the backward pass runs at 0.8
  of the forward efficiency; a stack's FlashAttention-2 on Hopper/Blackwell runs at
  :func:`~trainsim.cost.attention_kernels.flash_kernel_factor` of it, FlashAttention-1 on Ampere at its published
  level (:func:`~trainsim.cost.attention_kernels.flash_kernel_efficiency`).
- Elementwise/norm/softmax kernels: memory-bound, bytes at the achieved HBM bandwidth.

Every kernel also pays :attr:`~trainsim.cost.calibration.Calibration.kernel_overhead_s`.
"""

from __future__ import annotations

import math
from functools import lru_cache

from trainsim.cost.attention_kernels import flash_kernel_efficiency, flash_kernel_factor
from trainsim.cost.calibration import Calibration
from trainsim.spec.system import GPU
from trainsim.workload.ops import LOW_PRECISION, ComputeOp

# (tile rows, tile cols, relative speed of that tile shape)
TILES: tuple[tuple[int, int, float], ...] = (
    (256, 128, 1.0),
    (128, 256, 1.0),
    (128, 128, 0.95),
    (128, 64, 0.88),
    (64, 128, 0.88),
    (64, 64, 0.75),
)
K_HALF = 64  # k at which a tile spends as long in prologue/epilogue as in its main loop
ATTENTION_BWD_RATIO = 0.8
ATTENTION_Q_TILE = 128


def _wave_utilisation(tiles: int, num_sms: int) -> float:
    waves = math.ceil(tiles / num_sms)
    return tiles / (waves * num_sms)


def gemm_shape_efficiency(batch: int, m: int, n: int, k: int, num_sms: int) -> float:
    """Fraction of the large-GEMM efficiency reached by this shape (1.0 for large, well-divisible GEMMs)."""
    best = 0.0
    for tm, tn, speed in TILES:
        tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
        tiles = batch * tiles_m * tiles_n
        tile_util = (m * n) / (tiles_m * tm * tiles_n * tn)
        util = speed * tile_util * _wave_utilisation(tiles, num_sms)
        best = max(best, util)
    return best * k / (k + K_HALF) * (1 + K_HALF / 4096)  # normalised so that k = 4096 loses nothing


def _peak(gpu: GPU, dtype: str) -> float:
    return gpu.peak_flops.for_dtype(dtype)


@lru_cache(maxsize=65536)
def op_time(op: ComputeOp, gpu: GPU, calib: Calibration) -> float:
    """Seconds for one execution of ``op`` on ``gpu``."""
    mem_bw = gpu.hbm_bandwidth * calib.memory_efficiency
    memory_time = op.bytes / mem_bw
    if op.kind == "gemm":
        eff = calib.fp8_gemm_efficiency if op.dtype in LOW_PRECISION else calib.gemm_efficiency
        eff *= min(1.0, gemm_shape_efficiency(op.batch, op.m, op.n, op.k, gpu.num_sms))
        compute_time = op.flops / (_peak(gpu, op.dtype) * eff) if op.flops else 0.0
        return max(compute_time, memory_time) + calib.kernel_overhead_s
    if op.kind == "attention":
        assert op.attn is not None
        batch, heads, seq_q, seq_kv, head_dim, causal = op.attn
        tiles = batch * heads * math.ceil(seq_q / ATTENTION_Q_TILE)
        wave = _wave_utilisation(tiles, gpu.num_sms)
        if (documented := flash_kernel_efficiency(op.kernel, gpu.generation)) is not None:
            eff = documented * wave * op.efficiency  # the library's published level, both passes
        else:
            eff = calib.attention_efficiency * wave * min(1.0, head_dim / 128) ** 0.3
            if op.phase == "bwd":
                eff *= ATTENTION_BWD_RATIO
            eff *= op.efficiency * flash_kernel_factor(op.kernel, gpu.generation, head_dim, seq_kv, bool(causal))
        compute_time = op.flops / (_peak(gpu, "bf16" if op.dtype in LOW_PRECISION else op.dtype) * eff)
        return max(compute_time, memory_time) + calib.kernel_overhead_s
    compute_time = op.flops / gpu.vector_flops if op.flops else 0.0
    return max(compute_time, memory_time) + calib.kernel_overhead_s


def ops_time(ops: tuple[ComputeOp, ...], gpu: GPU, calib: Calibration) -> float:
    """Total seconds of a sequence of ops on one stream."""
    return sum(op_time(op, gpu, calib) for op in ops)
