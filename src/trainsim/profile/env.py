"""Provenance of a measurement: device name, its normalised key, library and driver versions, host, time."""

from __future__ import annotations

import contextlib
import datetime as _dt
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

from trainsim.cost.tables import gpu_key


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``'s model name, else the platform's processor string)."""
    with contextlib.suppress(OSError):  # no /proc: fall back to the platform's string
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def nvidia_driver_version() -> str:
    """The NVIDIA kernel driver version, or ``""`` where it cannot be found."""
    with contextlib.suppress(OSError):  # no driver file: ask nvidia-smi below
        text = Path("/proc/driver/nvidia/version").read_text()
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
        if m:
            return m.group(1)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def device_info(device: Any, gpu_name: str | None = None) -> dict[str, Any]:
    """Provenance columns of an operator table for ``device`` (a ``torch.device``).

    ``gpu_name`` overrides the name used for the table's ``gpu`` key (e.g. to label a GPU the driver names oddly).
    """
    import torch

    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else cpu_name()
    cudnn = torch.backends.cudnn.version() if cuda and torch.backends.cudnn.is_available() else None
    return {
        "device": device.type,
        "device_name": name,
        "gpu": gpu_key(gpu_name) if gpu_name else (gpu_key(name) if cuda else "cpu"),
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "cuda_version": (torch.version.cuda or "") if cuda else "",
        "cudnn_version": str(cudnn) if cudnn else "",
        "driver_version": nvidia_driver_version() if cuda else "",
        "hostname": socket.gethostname(),
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
