"""A DeepSpeed configuration file (``ds_config.json``) as job options: ``trainsim predict --deepspeed-config FILE``.

The keys that change time, memory or cost map onto trainsim's job options (DeepSpeed's configuration documentation,
"DeepSpeed Configuration JSON"):

=====================================================  ==============================================================
``train_batch_size``                                   ``--global-batch-size``
``train_micro_batch_size_per_gpu``                     ``--micro-batch-size``
``gradient_accumulation_steps``                        with the micro-batch and the GPUs, the global batch when
                                                       ``train_batch_size`` is absent
``fp16.enabled`` / ``bf16.enabled``                    ``--fp16`` / ``--bf16``
``zero_optimization.stage``                            ``--zero-stage``
``zero_optimization.offload_optimizer.device: cpu``    ``--optimizer-cpu-offload``
``zero_optimization.offload_param.device: cpu``        ``--param-cpu-offload``
=====================================================  ==============================================================

``"auto"`` values (filled in by the Hugging Face integration at run time) are skipped, offloading to NVMe is refused
(not modelled), and every other key is listed as ignored. Flags given to trainsim (and a ``--megatron-args`` script)
win; without ``--framework`` the job runs under the ``deepspeed`` profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.cli.job_options import fill_unset
from trainsim.errors import TrainsimError, read_text

FIELD = "deepspeed_config"
#: Top-level keys read (the rest are listed as ignored).
READ = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "fp16", "bf16",
        "zero_optimization")


@dataclass
class DeepSpeedConfig:
    """The job options a DeepSpeed configuration sets, the keys it ignored and notes on how it was read."""

    options: dict[str, Any] = field(default_factory=dict)
    gradient_accumulation_steps: int | None = None
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _int(data: dict[str, Any], key: str, where: str = "") -> int | None:
    value = data.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrainsimError(FIELD, f"{where}{key} must be a positive integer or \"auto\" (got {value!r})",
                            f"fix {key} in the DeepSpeed configuration")
    return value


def _section(data: dict[str, Any], key: str, where: str, example: str) -> dict[str, Any] | None:
    """The object under ``key`` (``None`` when absent); anything else is a one-line error."""
    section = data.get(key)
    if section is not None and not isinstance(section, dict):
        raise TrainsimError(FIELD, f"{where}{key} must be an object (got {section!r})", f"write \"{key}\": {example}")
    return section


def _enabled(data: dict[str, Any], key: str) -> bool:
    section = _section(data, key, "", '{"enabled": true}')
    return section is not None and section.get("enabled") is True


def _device(zero: dict[str, Any], key: str) -> str | None:
    section = _section(zero, key, "zero_optimization.", '{"device": "cpu"}')
    if section is None:
        return None
    device = section.get("device", "none")
    if device == "nvme":
        raise TrainsimError(FIELD, f"zero_optimization.{key}.device nvme: offloading to NVMe is not modelled",
                            "offload to \"cpu\" or not at all")
    if device not in ("cpu", "none", None):
        raise TrainsimError(FIELD, f"zero_optimization.{key}.device must be cpu, nvme or none (got {device!r})",
                            "fix the device")
    return device if device == "cpu" else None


def parse_deepspeed_config(data: Any) -> DeepSpeedConfig:
    """The job options of a parsed DeepSpeed configuration (module docstring)."""
    if not isinstance(data, dict):
        raise TrainsimError(FIELD, "the configuration must be a JSON object", "give a ds_config.json")
    out = DeepSpeedConfig()
    gbs, mbs = _int(data, "train_batch_size"), _int(data, "train_micro_batch_size_per_gpu")
    if gbs is not None:
        out.options["global_batch_size"] = gbs
    if mbs is not None:
        out.options["micro_batch_size"] = mbs
    out.gradient_accumulation_steps = _int(data, "gradient_accumulation_steps")
    fp16, bf16 = _enabled(data, "fp16"), _enabled(data, "bf16")
    if fp16 and bf16:
        raise TrainsimError(FIELD, "fp16 and bf16 are both enabled", "enable one of them")
    if fp16 or bf16:
        out.options["fp16" if fp16 else "bf16"] = True
    zero = _section(data, "zero_optimization", "", '{"stage": N}')
    if zero is not None:
        stage = zero.get("stage", 0)
        if stage not in (0, 1, 2, 3):
            raise TrainsimError(FIELD, f"zero_optimization.stage must be 0-3 (got {stage!r})", "fix the stage")
        out.options["zero_stage"] = stage
        if _device(zero, "offload_optimizer") == "cpu":
            out.options["optimizer_cpu_offload"] = True
        if _device(zero, "offload_param") == "cpu":
            out.options["param_cpu_offload"] = True
    out.ignored = sorted(k for k in data if k not in READ)
    return out


def read_deepspeed_config(path: str) -> DeepSpeedConfig:
    """Read and parse a DeepSpeed configuration file; one-line errors for a missing or malformed file."""
    p = Path(path)
    text = read_text(p, FIELD, "give the path of the ds_config.json", "give a JSON text file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrainsimError(FIELD, f"{p} is not valid JSON ({exc.msg} at line {exc.lineno})",
                            "fix the JSON") from None
    return parse_deepspeed_config(data)


def parse_deepspeed_text(name: str, text: str) -> DeepSpeedConfig:
    """A DeepSpeed configuration a launch script writes itself (a here-document), read like a file."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrainsimError(FIELD, f"the configuration the script writes to {name} is not valid JSON ({exc.msg} at "
                            f"line {exc.lineno})", "give the configuration with --deepspeed-config FILE") from None
    cfg = parse_deepspeed_config(data)
    cfg.notes.insert(0, f"read from the launch script, which writes it to {name}")
    return cfg


def merge_deepspeed_into_options(given: dict[str, Any], cfg: DeepSpeedConfig) -> dict[str, Any]:
    """Job options with the configuration's values where the flags (and a Megatron script) left them unset; the
    global batch from micro-batch × accumulation steps × data-parallel size when ``train_batch_size`` is absent."""
    out = fill_unset(given, cfg.options)
    if out.get("global_batch_size") is None and cfg.gradient_accumulation_steps and out.get("num_gpus"):
        model_parallel = 1
        for axis in ("tp", "pp", "cp"):
            model_parallel *= int(out.get(axis) or 1)
        dp = int(out["num_gpus"]) // model_parallel
        mbs = int(out.get("micro_batch_size") or 1)
        out["global_batch_size"] = mbs * cfg.gradient_accumulation_steps * dp
        cfg.notes.append(f"global batch {out['global_batch_size']} = micro-batch {mbs} × "
                         f"gradient_accumulation_steps {cfg.gradient_accumulation_steps} × dp {dp}")
    if out.get("framework") is None:
        out["framework"] = "deepspeed"
    return out
