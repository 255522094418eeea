"""Cluster specification: GPU, node (NVLink/NVSwitch domain) and network.

Inside, everything is SI: FLOP/s, bytes, bytes/s, seconds. Bandwidths are per GPU (or per NIC), per direction.
Preset files use readable units (TFLOP/s, GB/s, Gb/s, µs); :func:`system_from_dict` converts them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from trainsim.errors import TrainsimError
from trainsim.spec.base import Spec
from trainsim.spec.flags import Flag
from trainsim.spec.limits import MAX_NODE_GPUS, MAX_PRICE

PeakDtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "fp4"]
#: GPU generations with fitted calibration constants, and ``default`` (the documented uncalibrated constants).
Generation = Literal["volta", "ampere", "hopper", "blackwell", "default"]
GENERATIONS: tuple[str, ...] = ("volta", "ampere", "hopper", "blackwell", "default")


class PeakFlops(Spec, frozen=True):
    """Dense tensor-core peak FLOP/s per data type (no structured sparsity)."""

    fp32: float = Field(gt=0)
    tf32: float = Field(gt=0)
    fp16: float = Field(gt=0)
    bf16: float | None = Field(default=None, gt=0, description="None: no BF16 tensor cores (Volta)")
    fp8: float | None = Field(default=None, gt=0)
    fp4: float | None = Field(default=None, gt=0, description="NVFP4 (Blackwell); None: no FP4 tensor cores")

    def for_dtype(self, dtype: str) -> float:
        """Peak for a data type; FP4 falls back to FP8 and FP8 to FP16 on GPUs without those tensor cores."""
        value = getattr(self, dtype, None)
        if value is None:
            if dtype == "fp4":
                return self.for_dtype("fp8")
            if dtype == "fp8":
                return self.fp16
            if dtype == "bf16":
                raise TrainsimError("training.precision", "bf16: this GPU has no BF16 tensor cores (Volta: FP16 only)",
                                    "train in fp16 (--fp16)")
            raise TrainsimError("precision", f"unknown data type {dtype!r}", "use fp32, tf32, fp16, bf16, fp8 or fp4")
        return float(value)


class GPU(Spec, frozen=True):
    """One accelerator."""

    name: str
    generation: Generation = Field(description="calibration key: volta, ampere, hopper, blackwell or default")
    peak_flops: PeakFlops
    vector_flops: float = Field(gt=0, description="non-tensor-core FP32 FLOP/s")
    hbm_bandwidth: float = Field(gt=0, description="bytes/s")
    hbm_capacity: float = Field(gt=0, description="bytes")
    num_sms: int = Field(gt=0)


class Node(Spec, frozen=True):
    """GPUs joined by NVLink/NVSwitch: a server, or a rack-scale NVLink domain such as NVL72."""

    gpus_per_node: Annotated[int, Flag("--gpus-per-node", megatron=False,
                                       help="GPUs per node / NVLink domain (e.g. 4, 8, 72)")] = Field(
        gt=0, le=MAX_NODE_GPUS)
    nvlink_bandwidth: float = Field(gt=0, description="bytes/s per GPU per direction")
    nvlink_latency: float = Field(
        default=3.4e-6, ge=0, description="s, one NCCL ring step over NVLink with the Simple protocol (NCCL's 3.4 µs)"
    )
    nvlink_sharp: bool | None = Field(
        default=None, description="NVLink SHARP (NVLS) in the switches; None: Hopper or newer with NVSwitch (> 2 GPUs)"
    )


class Network(Spec, frozen=True):
    """Scale-out network between nodes."""

    nics_per_node: Annotated[int, Flag("--nics-per-node", megatron=False, help="scale-out NICs per node")] = Field(
        gt=0, le=MAX_NODE_GPUS)
    nic_bandwidth: Annotated[float, Flag("--nic-bandwidth-gbps", param="nic_bandwidth_gbps", scale=1e9 / 8,
                                         megatron=False, help="bandwidth per NIC per direction", unit="Gb/s")] = Field(
        gt=0, description="bytes/s per NIC per direction")
    latency: float = Field(
        default=14e-6, ge=0, description="s, one NCCL ring step across nodes with the Simple protocol (NCCL's 14 µs)"
    )
    oversubscription: float = Field(default=1.0, ge=1.0, description="bandwidth divisor above full_bisection_nodes")
    full_bisection_nodes: int | None = Field(
        default=None, gt=0, description="largest job (in nodes) with full bisection bandwidth; None: always"
    )


class Host(Spec, frozen=True):
    """The CPU side of a node, per GPU: what CPU offloading (optimizer, and parameter shards) runs on."""

    link_bandwidth: float = Field(gt=0, description="bytes/s per GPU per direction between host memory and the GPU "
                                                    "(PCIe, or NVLink-C2C on Grace parts)")
    memory_bandwidth: float = Field(gt=0, description="bytes/s of host DRAM bandwidth per GPU (the node's CPU "
                                                      "memory bandwidth divided by its GPUs)")


class System(Spec, frozen=True):
    """A cluster of identical nodes."""

    name: str = "custom"
    gpu: GPU
    node: Node
    network: Network
    host: Host | None = Field(default=None, description="CPU side per GPU; None: not described (no CPU offloading)")
    price_per_gpu_hour: Annotated[float, Flag("--price-per-gpu-hour", megatron=False, help="price per GPU-hour",
                                              unit="USD")] = Field(default=2.0, ge=0, le=MAX_PRICE, description="USD")
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
def system_from_dict(data: dict[str, Any], name: str | None = None) -> System:
    """Build a :class:`System` from the readable YAML format of ``presets/systems/*.yaml``.

    The format is a strict schema with the unit in every key (see :mod:`trainsim.spec.system_file` and
    ``docs/systems.md``); unknown keys and unknown GPU generations are errors.
    """
    from trainsim.spec.system_file import system_from_file_data

    return system_from_file_data(data, name)
