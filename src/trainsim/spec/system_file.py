"""The system YAML format (``presets/systems/*.yaml``, ``--system FILE.yaml``) as a strict schema.

Readable units at the edge, each spelled in the key's suffix, one suffix per unit:

============  =====================================  ==========================
suffix        unit                                   example key
============  =====================================  ==========================
``_tflops``   TFLOP/s (1e12 FLOP/s)                  ``peak_tflops.bf16``
``_tb_s``     TB/s (1e12 bytes/s)                    ``hbm_bandwidth_tb_s``
``_gb``       GB (1e9 bytes)                         ``hbm_capacity_gb``
``_gb_s``     GB/s (1e9 bytes/s), per direction      ``nvlink_bandwidth_gb_s``
``_gbit_s``   Gb/s (1e9 bits/s), per direction       ``nic_bandwidth_gbit_s``
``_us``       microseconds                           ``latency_us``
============  =====================================  ==========================

Unknown keys are errors (a typo must not silently fall back to a default); the names used before this schema
(``hbm_bandwidth_tbps``, ``nvlink_bandwidth_gbps`` in GB/s, ``nic_bandwidth_gbps`` in Gb/s: the same ``gbps`` suffix
for two units 8× apart) are read as deprecated aliases with a warning. The GPU ``generation`` selects the fitted
calibration constants and must be one of :data:`trainsim.spec.system.GENERATIONS`. Every field is documented in
``docs/systems.md``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainsim.errors import TrainsimError, warn
from trainsim.spec.base import to_trainsim_error
from trainsim.spec.limits import MAX_NODE_GPUS, MAX_PRICE
from trainsim.spec.system import GENERATIONS, Generation, System

#: Deprecated key → (new key, unit of both): section → {old: new}.
DEPRECATED_KEYS: dict[str, dict[str, str]] = {
    "gpu": {"hbm_bandwidth_tbps": "hbm_bandwidth_tb_s"},
    "node": {"nvlink_bandwidth_gbps": "nvlink_bandwidth_gb_s"},
    "network": {"nic_bandwidth_gbps": "nic_bandwidth_gbit_s"},
}

_TERA = 1e12
_GIGA = 1e9


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class PeakTflops(_File):
    """Dense tensor-core peak per data type, TFLOP/s (no structured sparsity)."""

    fp32: float = Field(gt=0, description="FP32 tensor-core (or FMA) peak")
    tf32: float = Field(gt=0, description="TF32 tensor-core peak")
    fp16: float = Field(gt=0, description="FP16 tensor-core peak")
    bf16: float | None = Field(default=None, gt=0, description="BF16 tensor-core peak; absent: no BF16 tensor cores "
                                                                "(Volta)")
    fp8: float | None = Field(default=None, gt=0, description="FP8 tensor-core peak; absent: no FP8 tensor cores")
    fp4: float | None = Field(default=None, gt=0, description="FP4 (NVFP4) tensor-core peak; absent: no FP4 tensor "
                                                              "cores")


class GPUFile(_File):
    """``gpu:`` section."""

    name: str = Field(min_length=1, description="GPU name (also the key of presets/prices.yaml)")
    generation: Generation = Field(description="calibration key: volta, ampere, hopper, blackwell or default")
    peak_tflops: PeakTflops
    vector_tflops: float = Field(gt=0, description="non-tensor-core FP32 peak, TFLOP/s")
    hbm_bandwidth_tb_s: float = Field(gt=0, description="HBM bandwidth, TB/s")
    hbm_capacity_gb: float = Field(gt=0, description="HBM capacity, GB (1e9 bytes; 80 GiB = 85.9 GB)")
    num_sms: int = Field(gt=0, le=1 << 16, description="streaming multiprocessors (wave quantization)")


class NodeFile(_File):
    """``node:`` section: GPUs joined by NVLink/NVSwitch (a server, or a rack-scale domain such as NVL72)."""

    gpus_per_node: int = Field(gt=0, le=MAX_NODE_GPUS, description="GPUs per NVLink domain")
    nvlink_bandwidth_gb_s: float = Field(gt=0, description="NVLink bandwidth per GPU per direction, GB/s")
    nvlink_latency_us: float | None = Field(default=None, ge=0, le=1e6,
                                            description="NCCL ring step latency over NVLink (Simple protocol), µs; "
                                                        "default 3.4 (NCCL's tuning table)")
    nvlink_sharp: bool | None = Field(default=None, description="NVLink SHARP (NCCL's NVLS) in the switches; "
                                      "default: Hopper or newer with more than 2 GPUs per domain")


class NetworkFile(_File):
    """``network:`` section: the scale-out network between nodes."""

    nics_per_node: int = Field(gt=0, le=MAX_NODE_GPUS, description="scale-out NICs per node")
    nic_bandwidth_gbit_s: float = Field(gt=0, description="bandwidth per NIC per direction, Gb/s")
    latency_us: float | None = Field(default=None, ge=0, le=1e6, description="NCCL ring step latency across nodes "
                                     "(Simple protocol), µs; default 14 (NCCL's tuning table)")
    oversubscription: float | None = Field(default=None, ge=1, description="bandwidth divisor beyond "
                                           "full_bisection_nodes")
    full_bisection_nodes: int | None = Field(default=None, gt=0, description="largest job (nodes) with full "
                                             "bisection bandwidth; absent: always")


class HostFile(_File):
    """``host:`` section (optional): the CPU side of a node, per GPU (read by CPU offloading)."""

    link_bandwidth_gb_s: float = Field(gt=0, description="host-GPU link per GPU per direction (PCIe or NVLink-C2C), "
                                                         "GB/s")
    memory_bandwidth_gb_s: float = Field(gt=0, description="host DRAM bandwidth per GPU (the node's CPU memory "
                                                           "bandwidth divided by its GPUs), GB/s")


class SystemFile(_File):
    """A whole system YAML file."""

    name: str | None = Field(default=None, description="system name (default: the file or preset name)")
    source: str | None = Field(default=None, description="where the numbers come from")
    price_per_gpu_hour: float | None = Field(default=None, ge=0, le=MAX_PRICE,
                                             description="USD per GPU-hour (default: presets/prices.yaml by GPU name)")
    gpu: GPUFile
    node: NodeFile
    network: NetworkFile
    host: HostFile | None = None

    def to_system(self, name: str | None = None) -> System:
        """The :class:`System` in SI units (absent optional fields keep :class:`System`'s defaults)."""
        node: dict[str, Any] = {"gpus_per_node": self.node.gpus_per_node,
                                "nvlink_bandwidth": self.node.nvlink_bandwidth_gb_s * _GIGA}
        if self.node.nvlink_latency_us is not None:
            node["nvlink_latency"] = self.node.nvlink_latency_us * 1e-6
        if self.node.nvlink_sharp is not None:
            node["nvlink_sharp"] = self.node.nvlink_sharp
        w = self.network
        network: dict[str, Any] = {"nics_per_node": w.nics_per_node,
                                   "nic_bandwidth": w.nic_bandwidth_gbit_s * _GIGA / 8}
        for key, value in (("latency", None if w.latency_us is None else w.latency_us * 1e-6),
                           ("oversubscription", w.oversubscription), ("full_bisection_nodes", w.full_bisection_nodes)):
            if value is not None:
                network[key] = value
        g = self.gpu
        data: dict[str, Any] = {
            "name": name or self.name or "custom",
            "source": self.source,
            "gpu": {"name": g.name, "generation": g.generation,
                    "peak_flops": {k: v * _TERA for k, v in g.peak_tflops.model_dump(exclude_none=True).items()},
                    "vector_flops": g.vector_tflops * _TERA, "hbm_bandwidth": g.hbm_bandwidth_tb_s * _TERA,
                    "hbm_capacity": g.hbm_capacity_gb * _GIGA, "num_sms": g.num_sms},
            "node": node,
            "network": network,
        }
        if self.price_per_gpu_hour is not None:
            data["price_per_gpu_hour"] = self.price_per_gpu_hour
        if self.host is not None:
            data["host"] = {"link_bandwidth": self.host.link_bandwidth_gb_s * _GIGA,
                            "memory_bandwidth": self.host.memory_bandwidth_gb_s * _GIGA}
        return System(**data)


def _renamed(data: dict[str, Any], origin: str) -> dict[str, Any]:
    """A copy with deprecated keys renamed (warning once per key); both names given is an error."""
    out = dict(data)
    for section, renames in DEPRECATED_KEYS.items():
        part = out.get(section)
        if not isinstance(part, dict):
            continue
        part = dict(part)
        for old, new in renames.items():
            if old in part:
                if new in part:
                    raise TrainsimError(f"system.{section}.{old}", f"given together with its new name {new}",
                                        f"keep only {new}")
                warn(f"system.{section}.{old}", f"is deprecated in {origin}: rename it to {new} (same unit)")
                part[new] = part.pop(old)
        out[section] = part
    return out


def parse_system_file(data: Any, origin: str = "system file") -> SystemFile:
    """Validate a parsed system YAML; raises :class:`TrainsimError` naming the field (``system.gpu.…``)."""
    if not isinstance(data, dict):
        raise TrainsimError("system", f"{origin} is not a mapping", "see docs/systems.md for the format")
    try:
        return SystemFile(**_renamed(data, origin))
    except ValidationError as exc:
        err = to_trainsim_error(exc, "system")
        if exc.errors()[0].get("type") == "literal_error" and err.field.endswith("generation"):
            raise TrainsimError(err.field, f"unknown GPU generation (got {exc.errors()[0].get('input')!r})",
                                f"use one of {', '.join(GENERATIONS)} (default: uncalibrated constants)") from None
        raise err from None


def system_from_file_data(data: Any, name: str | None = None, origin: str = "system file") -> System:
    """Parse and convert a system YAML mapping to a :class:`System`."""
    return parse_system_file(data, origin).to_system(name)
