"""Cluster specification: GPU, node (NVLink/NVSwitch domain) and network.

Inside, everything is SI: FLOP/s, bytes, bytes/s, seconds. Bandwidths are per GPU (or per NIC), per direction.
Preset files use readable units (TFLOP/s, GB/s, Gb/s, µs); :func:`system_from_dict` converts them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from trainsim.errors import TrainsimError
from trainsim.spec.base import Spec

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]


class PeakFlops(Spec):
    """Dense tensor-core peak FLOP/s per data type (no structured sparsity)."""

    fp32: float = Field(gt=0)
    tf32: float = Field(gt=0)
    fp16: float = Field(gt=0)
    bf16: float = Field(gt=0)
    fp8: float | None = Field(default=None, gt=0)

    def for_dtype(self, dtype: str) -> float:
        """Peak for a data type; FP8 falls back to FP16 on GPUs without FP8 tensor cores."""
        value = getattr(self, dtype, None)
        if value is None:
            if dtype == "fp8":
                return self.fp16
            raise TrainsimError("precision", f"unknown data type {dtype!r}", "use fp32, tf32, fp16, bf16 or fp8")
        return float(value)


class GPU(Spec):
    """One accelerator."""

    name: str
    generation: str = Field(description="calibration key, e.g. ampere, hopper, blackwell")
    peak_flops: PeakFlops
    vector_flops: float = Field(gt=0, description="non-tensor-core FP32 FLOP/s")
    hbm_bandwidth: float = Field(gt=0, description="bytes/s")
    hbm_capacity: float = Field(gt=0, description="bytes")
    num_sms: int = Field(gt=0)


class Node(Spec):
    """GPUs joined by NVLink/NVSwitch: a server, or a rack-scale NVLink domain such as NVL72."""

    gpus_per_node: int = Field(gt=0)
    nvlink_bandwidth: float = Field(gt=0, description="bytes/s per GPU per direction")
    nvlink_latency: float = Field(
        default=3.4e-6, ge=0, description="s, one NCCL ring step over NVLink with the Simple protocol (NCCL's 3.4 µs)"
    )
    nvlink_sharp: bool | None = Field(
        default=None, description="NVLink SHARP (NVLS) in the switches; None: Hopper or newer with NVSwitch (> 2 GPUs)"
    )


class Network(Spec):
    """Scale-out network between nodes."""

    nics_per_node: int = Field(gt=0)
    nic_bandwidth: float = Field(gt=0, description="bytes/s per NIC per direction")
    latency: float = Field(
        default=14e-6, ge=0, description="s, one NCCL ring step across nodes with the Simple protocol (NCCL's 14 µs)"
    )
    oversubscription: float = Field(default=1.0, ge=1.0, description="bandwidth divisor above full_bisection_nodes")
    full_bisection_nodes: int | None = Field(
        default=None, gt=0, description="largest job (in nodes) with full bisection bandwidth; None: always"
    )


class System(Spec):
    """A cluster of identical nodes."""

    name: str = "custom"
    gpu: GPU
    node: Node
    network: Network
    price_per_gpu_hour: float = Field(default=2.0, ge=0, description="USD")
    source: str | None = None

    @property
    def gpus_per_node(self) -> int:
        """GPUs per NVLink domain."""
        return self.node.gpus_per_node

    @property
    def has_nvls(self) -> bool:
        """Whether all-reduces inside a node can use NVLink SHARP (NCCL's NVLS algorithm)."""
        if self.node.nvlink_sharp is not None:
            return self.node.nvlink_sharp
        return self.gpu.generation in ("hopper", "blackwell") and self.node.gpus_per_node > 2

    def nic_bandwidth_per_gpu(self, num_nodes: int = 1) -> float:
        """Scale-out bandwidth available to one GPU (bytes/s per direction), with oversubscription applied."""
        bw = self.network.nics_per_node * self.network.nic_bandwidth / self.node.gpus_per_node
        limit = self.network.full_bisection_nodes
        if limit is not None and num_nodes > limit:
            bw /= self.network.oversubscription
        return bw


# ---- conversion from the readable preset format -------------------------------------------------------------------
_TERA = 1e12
_GIGA = 1e9


def system_from_dict(data: dict[str, Any], name: str | None = None) -> System:
    """Build a :class:`System` from the readable YAML format of ``presets/systems/*.yaml``.

    Units in that format: ``peak_tflops`` (TFLOP/s), ``vector_tflops``, ``hbm_bandwidth_tbps`` (TB/s),
    ``hbm_capacity_gb`` (GB = 1e9 bytes), ``nvlink_bandwidth_gbps`` (GB/s per GPU per direction),
    ``nic_bandwidth_gbps`` (Gb/s per NIC), latencies in µs, ``price_per_gpu_hour`` in USD.
    """
    try:
        g = data["gpu"]
        n = data["node"]
        w = data["network"]
    except (KeyError, TypeError) as exc:
        raise TrainsimError(
            f"system.{exc.args[0] if exc.args else 'gpu'}",
            "section missing",
            "a system file needs gpu:, node: and network: sections (see trainsim presets --systems)",
        ) from None
    if not all(isinstance(x, dict) for x in (g, n, w)):
        raise TrainsimError("system", "gpu, node and network must be mappings", "see presets/systems/*.yaml")
    peak = g.get("peak_tflops") or {}
    if not isinstance(peak, dict):
        raise TrainsimError("system.gpu.peak_tflops", "must map data types to TFLOP/s", "e.g. {bf16: 989}")
    nested = {
        "name": name or data.get("name", "custom"),
        "price_per_gpu_hour": data.get("price_per_gpu_hour", 2.0),
        "source": data.get("source"),
        "gpu": {
            "name": g.get("name", "gpu"),
            "generation": g.get("generation", "custom"),
            "peak_flops": {k: _scaled(v, _TERA) for k, v in peak.items()},
            "vector_flops": _num(g, "vector_tflops", "system.gpu") * _TERA,
            "hbm_bandwidth": _num(g, "hbm_bandwidth_tbps", "system.gpu") * _TERA,
            "hbm_capacity": _num(g, "hbm_capacity_gb", "system.gpu") * _GIGA,
            "num_sms": g.get("num_sms", 108),
        },
        "node": {
            "gpus_per_node": n.get("gpus_per_node", 8),
            "nvlink_bandwidth": _num(n, "nvlink_bandwidth_gbps", "system.node") * _GIGA,
            "nvlink_latency": _scaled(n.get("nvlink_latency_us", 3.4), 1e-6),
            "nvlink_sharp": n.get("nvlink_sharp"),
        },
        "network": {
            "nics_per_node": w.get("nics_per_node", 8),
            "nic_bandwidth": _num(w, "nic_bandwidth_gbps", "system.network") * _GIGA / 8,
            "latency": _scaled(w.get("latency_us", 14.0), 1e-6),
            "oversubscription": w.get("oversubscription", 1.0),
            "full_bisection_nodes": w.get("full_bisection_nodes"),
        },
    }
    return System(**nested)


def _scaled(value: Any, factor: float) -> Any:
    """Scale a number; leave anything else for validation to reject with the field name."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value * factor
    return value


def _num(section: dict[str, Any], key: str, path: str) -> float:
    if key not in section:
        raise TrainsimError(f"{path}.{key}", "is required", f"add {key} to the system file")
    value = section[key]
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise TrainsimError(f"{path}.{key}", f"must be a positive number (got {value!r})", "fix the value")
    return float(value)
