"""Measured GEMM and attention efficiency surfaces, used by default on Hopper GPUs.

The H100 sweeps of ``shared/data/gpu-h100`` (``h100-sweep-{bf16,fp8}.parquet``: GEMMs with m, n, k from 256 to
16,384 in the three ``nn.Linear`` layouts, bf16 and FP8 ``_scaled_mm``; cuDNN SDPA attention with batch·heads 8–128,
sequence 512–16,384, head dim 64/128, causal) are reduced by :func:`derive_kernel_table` to one compact operator
table shipped as ``trainsim/data/profiles/h100-kernels/h100-kernels.parquet`` (provenance in its README). It is read
through the existing measured-table machinery (:class:`~trainsim.cost.tables.OpTimes`: log-throughput interpolated
multilinearly on the sweep grid) — no second interpolator.

:class:`SurfaceCostModel` prices a GEMM or attention kernel as ``FLOPs / (η(shape) · peak)`` with ``η`` the measured
H100 throughput at that shape divided by the H100 datasheet peak of its dtype (attention: times the stack's kernel
library against the measured cuDNN, :mod:`trainsim.cost.attention_kernels`), times the fitted end-to-end factor
``measured_kernel_scale`` (``measured_fp8_kernel_scale`` for FP8; :mod:`trainsim.cost.calibration`: sustained clocks
and gaps of a real training step, never kernel shape): on an H100 with factor 1 this *is* the measured time; on
another Hopper part (H200, H800, GH200) the H100 surface is the shape model, scaled by that GPU's peak.
Shapes beyond the grid's largest dimension take the efficiency at the largest measured size (throughput saturates
with size); shapes below the smallest (m, n, k < 256, head dims other than 64/128) and everything else fall back to
the analytic roofline of :mod:`trainsim.cost.compute`. A100 and Blackwell GPUs stay on the analytic surface (not
measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from trainsim.cost.attention_kernels import flash_kernel_factor
from trainsim.cost.calibration import Calibration
from trainsim.cost.job_costs import AnalyticCostModel
from trainsim.workload.ops import ComputeOp

#: The GPU whose kernels were measured, and the generations that use its surface as their shape model.
MEASURED_GPU = "h100"
SURFACE_GENERATIONS = frozenset({"hopper"})
TABLE = ("data", "profiles", "h100-kernels", "h100-kernels.parquet")
#: H100 SXM5 dense peaks (datasheet) that turn measured throughput into efficiency.
H100_PEAK = {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12}
#: Shapes whose interpolated throughput a surface keeps (cleared when full).
MEMO_SIZE = 65_536
KEEP = ("name", "phase", "kind", "dtype", "batch", "m", "n", "k", "attn_batch", "attn_heads", "attn_seq_q",
        "attn_seq_kv", "attn_head_dim", "attn_causal", "layout", "flops", "time_s", "time_min_s", "time_max_s",
        "repetitions", "source", "backend", "device_name", "gpu", "torch_version", "cuda_version", "cudnn_version",
        "driver_version", "measured_at")


def derive_kernel_table(sweeps: Sequence[str | Path]) -> pd.DataFrame:
    """The compact GEMM/attention table of measured sweeps: their GEMM and attention rows, key and timing columns."""
    frames = [pd.read_parquet(p) for p in sweeps]
    df = pd.concat(frames, ignore_index=True)
    keep = df.loc[df["kind"].isin(["gemm", "attention"]) & (df["time_s"] > 0), [c for c in KEEP if c in df.columns]]
    return pd.DataFrame(keep).reset_index(drop=True)


@dataclass
class KernelSurface:
    """The measured grids (from :class:`~trainsim.cost.tables.OpTimes`) with their coordinate ranges."""

    ops: object  # OpTimes (imported lazily: tables imports job_costs)
    gpu: str = MEASURED_GPU
    #: throughput per op shape already interpolated (a pure function of the op and the grids); bounded because an
    #: open search meets many shapes
    _memo: dict[ComputeOp, float | None] = field(default_factory=dict, repr=False, compare=False)

    def throughput(self, op: ComputeOp) -> float | None:
        """Measured FLOP/s of ``op``'s shape on the measured GPU (large dimensions clamped to the grid), or None."""
        memo = self._memo
        if op in memo:
            return memo[op]
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        value = memo[op] = self._interpolate(op)
        return value

    def clear_memo(self) -> None:
        """Forget the interpolated shapes (benchmarks of a cold prediction)."""
        self._memo.clear()

    def _interpolate(self, op: ComputeOp) -> float | None:
        from trainsim.cost.tables import OpTimes, gemm_layout

        ops = self.ops
        assert isinstance(ops, OpTimes)
        if op.kind == "gemm" and op.flops > 0:
            grid = ops.gemm_grids.get((op.dtype, gemm_layout(op)))
            if grid is None or min(op.batch, op.m, op.n, op.k) <= 0:
                return None
            point = [math.log(op.batch * op.m), math.log(op.n), math.log(op.k)]
        elif op.kind == "attention" and op.attn is not None and op.flops > 0:
            b, h, sq, skv, d, causal = op.attn
            grid = ops.attention_grids.get((op.dtype, op.phase, d, bool(causal)))
            if grid is None or sq != skv or b * h <= 0:
                return None
            point = [math.log(b * h), math.log(sq)]
        else:
            return None
        clamped = [min(x, axis[-1]) for x, axis in zip(point, grid.axes, strict=True)]
        v = grid(clamped)
        return None if v is None else math.exp(v)


@cache
def packaged_table() -> pd.DataFrame | None:
    """The shipped H100 kernel table, read and validated once (``None`` if the package data is missing)."""
    from trainsim.cost.tables import read_table

    path = resources.files("trainsim").joinpath(*TABLE)
    if not path.is_file():
        return None
    return read_table(str(path), "ops")


@cache
def packaged_surface() -> KernelSurface | None:
    """The shipped H100 surface (``None`` if the package data is missing)."""
    from trainsim.cost.tables import OpTimes

    table = packaged_table()
    return None if table is None else KernelSurface(OpTimes.from_frame(table))


@dataclass
class SurfaceCostModel(AnalyticCostModel):
    """The analytic model with GEMM and attention kernels priced from a measured efficiency surface."""

    surface: KernelSurface | None = None
    measured_gpu: bool = False  # the job runs on the measured GPU itself (not only its shape model)
    _hits: dict[ComputeOp, float | None] = field(default_factory=dict, repr=False)  # misses too (None)

    def _surface_time(self, op: ComputeOp) -> float | None:
        if op in self._hits:
            return self._hits[op]
        t: float | None = None
        thr = self.surface.throughput(op) if self.surface is not None else None
        ref = H100_PEAK.get("bf16" if op.dtype == "fp8" and op.kind == "attention" else op.dtype)
        if thr is not None and ref:
            peak = self.system.gpu.peak_flops.for_dtype("bf16" if op.kind == "attention" and op.dtype == "fp8"
                                                        else op.dtype)
            scale = (self.calibration.measured_fp8_kernel_scale if op.dtype == "fp8"
                     else self.calibration.measured_kernel_scale)
            eff = op.efficiency
            if op.kind == "attention" and op.attn is not None:  # the stack's kernel library against cuDNN's
                _b, _h, _sq, seq_kv, head_dim, causal = op.attn
                eff *= flash_kernel_factor(op.kernel, self.system.gpu.generation, head_dim, seq_kv, bool(causal))
            t = op.flops / (thr / ref * peak * scale * eff)
        self._hits[op] = t
        return t

    def compute(self, op: ComputeOp) -> float:
        """Surface time of a GEMM/attention kernel on the grid, else the analytic roofline."""
        t = self._surface_time(op)
        if t is None:
            return super().compute(op)
        return max(t, self.host_dispatch_s)

    def is_measured(self, op: object) -> bool:
        """Kernels priced from the surface on the measured GPU itself count as measured."""
        return self.measured_gpu and isinstance(op, ComputeOp) and self._surface_time(op) is not None


#: Shapes whose measured efficiency describes "a large kernel" (the analytic model's shape factor is 1 there).
LARGE_GEMM_DIM = 4096
LARGE_ATTENTION_SEQ = 4096


@cache
def large_kernel_efficiencies() -> dict[str, float] | None:
    """Median measured efficiency of large H100 kernels, as fractions of the H100 datasheet peak.

    ``gemm_efficiency`` / ``fp8_gemm_efficiency``: 16-bit and FP8 GEMMs with m, n, k all at least
    :data:`LARGE_GEMM_DIM` (all three ``nn.Linear`` layouts); ``attention_efficiency``: causal forward attention with
    head dimension 128 and sequence at least :data:`LARGE_ATTENTION_SEQ`. ``None`` without the packaged table.
    """
    df = packaged_table()
    if df is None:
        return None
    eff = df["flops"] / df["time_s"] / df["dtype"].map(H100_PEAK).astype(float)
    gemm = (df["kind"] == "gemm") & (df[["m", "n", "k"]].min(axis=1) >= LARGE_GEMM_DIM)
    attn = ((df["kind"] == "attention") & (df["phase"] == "fwd") & (df["dtype"] == "bf16")
            & (df["attn_head_dim"] == 128) & df["attn_causal"].astype(bool)
            & (df["attn_seq_q"] >= LARGE_ATTENTION_SEQ))
    return {
        "gemm_efficiency": float(eff[gemm & (df["dtype"] == "bf16")].median()),
        "fp8_gemm_efficiency": float(eff[gemm & (df["dtype"] == "fp8")].median()),
        "attention_efficiency": float(eff[attn].median()),
    }


@cache
def transferred_calibration(measured: Calibration) -> Calibration:
    """Constants for an unmeasured generation from the measured one's (Blackwell from Hopper).

    The analytic roofline stays the shape model, but its large-kernel efficiencies are no longer priors: they are
    the measured H100 large-kernel efficiencies (:func:`large_kernel_efficiencies`) times the measured generation's
    fitted end-to-end factors (``measured_kernel_scale``, ``measured_fp8_kernel_scale``: sustained clocks, launch
    gaps, FP8 scaling bookkeeping), i.e. the fraction of the datasheet peak the same software reaches in training.
    """
    eff = large_kernel_efficiencies()
    if eff is None:
        return measured
    scale, fp8_scale = measured.measured_kernel_scale, measured.measured_fp8_kernel_scale
    return measured.with_(gemm_efficiency=eff["gemm_efficiency"] * scale,
                          fp8_gemm_efficiency=eff["fp8_gemm_efficiency"] * fp8_scale,
                          attention_efficiency=eff["attention_efficiency"] * scale)


def uses_surface(gpu_name: str, generation: str) -> bool:
    """Whether jobs on this GPU are priced with the measured surface by default."""
    return generation in SURFACE_GENERATIONS and packaged_surface() is not None


if __name__ == "__main__":  # regenerate the packaged table: python -m trainsim.cost.kernel_surfaces SWEEP...
    import sys

    from trainsim.cost.tables import write_table

    target = Path(str(resources.files("trainsim").joinpath(*TABLE)))
    write_table(derive_kernel_table(sys.argv[1:]), target, "ops")
    print(f"wrote {target}")
