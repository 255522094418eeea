"""Calibration constants per GPU generation, stored in ``presets/calibration.yaml``.

They are the only fitted numbers of the analytic model; ``trainsim calibrate`` refits them on the published
measurements (``trainsim/data/published/measurements.csv``) and ``trainsim validate`` reports the error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from importlib import resources
from typing import Any

import yaml

from trainsim.errors import TrainsimError


@dataclass(frozen=True, slots=True)
class Calibration:
    """Efficiency constants of one GPU generation (fractions of the datasheet peak)."""

    gemm_efficiency: float = 0.80  # large 16-bit GEMMs, fraction of dense tensor peak
    fp8_gemm_efficiency: float = 0.60  # large FP8 GEMMs, fraction of the FP8 peak
    attention_efficiency: float = 0.55  # FlashAttention forward, fraction of 16-bit peak (backward: x0.8)
    memory_efficiency: float = 0.80  # achieved fraction of HBM bandwidth by memory-bound kernels
    nvlink_efficiency: float = 0.75  # achieved NCCL bus bandwidth / NVLink bandwidth
    network_efficiency: float = 0.85  # achieved NCCL bus bandwidth / NIC line rate
    kernel_overhead_s: float = 4e-6  # launch gap per kernel on the compute stream
    overlap_slowdown: float = 0.10  # compute slowdown while overlapped with communication (Proteus' factor - 1)
    iteration_overhead_s: float = 0.0  # fixed per iteration (data loading, logging, synchronisation)
    # achieved fraction of the measured-surface kernel speed in end-to-end training (sustained clocks under power,
    # launch gaps between back-to-back GEMMs); 16-bit and FP8 (TE scaling/amax bookkeeping) separately
    measured_kernel_scale: float = 1.0
    measured_fp8_kernel_scale: float = 1.0

    def with_(self, **changes: float) -> Calibration:
        """A copy with some constants changed."""
        return replace(self, **changes)

    def as_dict(self) -> dict[str, float]:
        """Plain dictionary."""
        return asdict(self)


CALIBRATION_FILE = "calibration.yaml"


@cache
def _load() -> dict[str, Calibration]:
    path = resources.files("trainsim") / "presets" / CALIBRATION_FILE
    data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    names = {f.name for f in fields(Calibration)}
    out: dict[str, Calibration] = {}
    base = {k: v for k, v in (data.get("default") or {}).items() if k in names}
    for gen, values in data.items():
        if gen == "default" or gen.startswith("_"):
            continue
        out[gen] = Calibration(**{**base, **{k: v for k, v in (values or {}).items() if k in names}})
    out["default"] = Calibration(**base)
    return out


def calibration_for(generation: str) -> Calibration:
    """Constants for a GPU generation (``volta``, ``ampere``, ``hopper``, ``blackwell``); unknown ones get the
    defaults.

    Blackwell has no published measurement in the calibration set and no measured kernels: it inherits Hopper's
    fitted constants, with the analytic model's large-kernel efficiencies taken from the measured H100 kernels
    (:func:`trainsim.cost.kernel_surfaces.transferred_calibration`) instead of priors. Volta has none either: it
    takes Ampere's, the nearest generation priced by the same analytic model (synchronous ``mma`` tensor cores, no
    measured surface), at its own peaks and bandwidths.
    """
    table = _load()
    if generation in table:
        return table[generation]
    if generation == "volta" and "ampere" in table:
        return table["ampere"]
    if generation == "blackwell" and "hopper" in table:
        from trainsim.cost.kernel_surfaces import transferred_calibration

        return transferred_calibration(table["hopper"])
    return table["default"]


def calibration_from_mapping(values: dict[str, Any], base: Calibration | None = None) -> Calibration:
    """Override constants from a mapping (e.g. a user's YAML)."""
    names = {f.name for f in fields(Calibration)}
    unknown = set(values) - names
    if unknown:
        raise TrainsimError(
            f"calibration.{sorted(unknown)[0]}", "unknown constant", f"use one of {', '.join(sorted(names))}"
        )
    return replace(base or Calibration(), **{k: float(v) for k, v in values.items()})
