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
``zero_optimization.offload_param.device: cpu``        ``--param-cpu-offload`` (stage 3 only: DeepSpeed ignores it
                                                       below, and so does trainsim, with a note)
``tensor_parallel.autotp_size``                        ``--tp`` (DeepSpeed AutoTP)
``sequence_parallel`` (``size``/``ulysses.degree``)    ``--cp`` with all-to-all attention (DeepSpeed-Ulysses / ALST)
``expert_parallel.autoep_size``                        ``--ep``
``zero_optimization.overlap_comm`` (stages 1-2)        ``--overlap-grad-reduce``
``zero_optimization.reduce_bucket_size``               ``--reduce-bucket-size``
``zero_optimization.stage3_prefetch_bucket_size``      ``--stage3-prefetch-bucket-size``
``zero_optimization.stage3_max_live_parameters``       ``--stage3-max-live-parameters``
``zero_optimization.stage3_max_reuse_distance``        ``--stage3-max-reuse-distance``
``zero_optimization.stage3_param_persistence_...``     ``--stage3-param-persistence-threshold``
``data_types.grad_accum_dtype: fp32`` with bf16        ZeRO stage 1 becomes 0: DeepSpeed's engine runs the
                                                       ``BF16_Optimizer`` for it (``_do_optimizer_sanity_check``)
=====================================================  ==============================================================

Precision: ``fp16`` / ``bf16`` (or the legacy ``bfloat16``) enabled; a 16-bit section explicitly disabled and none
enabled is DeepSpeed's fp32 training; ``"auto"`` or no section leaves it to the flags. The micro-batch, when only
the global batch and the accumulation steps are given, is ``train_batch_size / (gradient_accumulation_steps × dp)``;
the three given and inconsistent is an error, as DeepSpeed raises (unless the flags set the batch).

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
        "bfloat16", "zero_optimization", "tensor_parallel", "sequence_parallel", "expert_parallel", "data_types")
#: ``zero_optimization`` element counts → job options (``--reduce-bucket-size``, the ``--stage3-*`` flags).
ZERO_COUNTS = {"reduce_bucket_size": "bucket_size_params", "stage3_prefetch_bucket_size": "prefetch_bucket_params",
               "stage3_max_live_parameters": "max_live_params", "stage3_max_reuse_distance": "max_reuse_params",
               "stage3_param_persistence_threshold": "param_persistence_threshold"}


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


def _count(data: dict[str, Any], key: str, where: str) -> int | None:
    """An element count (DeepSpeed writes them as ``5e8`` too); ``None`` when absent or ``"auto"``."""
    value = data.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise TrainsimError(FIELD, f"{where}{key} must be a non-negative whole number or \"auto\" (got {value!r})",
                            f"fix {key} in the DeepSpeed configuration")
    return int(value)


def _section(data: dict[str, Any], key: str, where: str, example: str) -> dict[str, Any] | None:
    """The object under ``key`` (``None`` when absent); anything else is a one-line error."""
    section = data.get(key)
    if section is not None and not isinstance(section, dict):
        raise TrainsimError(FIELD, f"{where}{key} must be an object (got {section!r})", f"write \"{key}\": {example}")
    return section


def _enabled(data: dict[str, Any], key: str) -> bool | None:
    """True / False as the section says; None when absent or ``"auto"``."""
    section = _section(data, key, "", '{"enabled": true}')
    if section is None or section.get("enabled") in (None, "auto"):
        return None
    return section.get("enabled") is True


def _parallel(data: dict[str, Any], out: DeepSpeedConfig) -> None:
    """AutoTP, Ulysses sequence parallelism and AutoEP degrees as tp, cp (all-to-all) and ep."""
    tp = _section(data, "tensor_parallel", "", '{"autotp_size": N}')
    if tp is not None and (size := _int(tp, "autotp_size", "tensor_parallel.")) and size > 1:
        out.options["tp"] = size
    sp = _section(data, "sequence_parallel", "", '{"enabled": true, "size": N}')
    if sp is not None and sp.get("enabled", True) is not False:
        inner = sp.get("ulysses")
        ulysses: dict[str, Any] = inner if isinstance(inner, dict) else {}
        size = _int(ulysses, "degree", "sequence_parallel.ulysses.") or _int(sp, "size", "sequence_parallel.")
        if size and size > 1:
            out.options["cp"] = size
            out.options["cp_comm_type"] = "a2a"
            out.notes.append(f"sequence_parallel {sp.get('mode', 'ulysses')} {size}: context parallelism with "
                             "all-to-all attention (DeepSpeed-Ulysses)")
    ep = _section(data, "expert_parallel", "", '{"enabled": true, "autoep_size": N}')
    if ep is not None and ep.get("enabled", True) is not False and (size := _int(ep, "autoep_size",
                                                                                 "expert_parallel.")) and size > 1:
        out.options["ep"] = size


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
    fp16 = _enabled(data, "fp16")
    bf16 = _enabled(data, "bf16") if "bf16" in data else _enabled(data, "bfloat16")  # bfloat16: the legacy key
    if fp16 and bf16:
        raise TrainsimError(FIELD, "fp16 and bf16 are both enabled", "enable one of them")
    if fp16 or bf16:
        out.options["fp16" if fp16 else "bf16"] = True
    elif fp16 is False or bf16 is False:
        out.options["fp32"] = True  # 16-bit disabled, none left "auto": DeepSpeed trains in fp32
        out.notes.append("fp32 training (fp16 and bf16 disabled)")
    zero = _section(data, "zero_optimization", "", '{"stage": N}')
    if zero is not None:
        stage = zero.get("stage", 0)
        if stage not in (0, 1, 2, 3):
            raise TrainsimError(FIELD, f"zero_optimization.stage must be 0-3 (got {stage!r})", "fix the stage")
        out.options["zero_stage"] = stage
        if _device(zero, "offload_optimizer") == "cpu":
            out.options["optimizer_cpu_offload"] = True
        if _device(zero, "offload_param") == "cpu":
            if stage == 3:
                out.options["param_cpu_offload"] = True
            else:  # DeepSpeed offloads parameters only with ZeRO-3 (the key is ignored below it)
                out.notes.append(f"zero_optimization.offload_param ignored: ZeRO stage {stage} does not offload "
                                 "parameters (DeepSpeed offloads them with stage 3 only)")
        overlap = zero.get("overlap_comm")
        if isinstance(overlap, bool) and stage in (1, 2):  # ZeRO-3's overlap is its prefetch and bucketing
            out.options["overlap_grad_reduce"] = overlap
        for key, name in ZERO_COUNTS.items():
            count = _count(zero, key, "zero_optimization.")
            if count is not None and (count > 0 or name == "param_persistence_threshold"):
                out.options[name] = count
        types = _section(data, "data_types", "", '{"grad_accum_dtype": "fp32"}')
        if (stage == 1 and bf16 and types is not None and types.get("grad_accum_dtype") == "fp32"
                and "optimizer_cpu_offload" not in out.options):
            out.options["zero_stage"] = 0
            out.notes.append("bf16 with zero_optimization.stage 1 and data_types.grad_accum_dtype fp32: DeepSpeed "
                             "runs its BF16_Optimizer (stage 0, its own ZeRO-1 equivalent)")
    _parallel(data, out)
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
    stated = {k: v for k, v in cfg.options.items()
              if not (k == "fp32" and any(given.get(p) for p in ("fp16", "bf16", "fp8")))}  # a precision flag wins
    out = fill_unset(given, stated)
    gas = cfg.gradient_accumulation_steps
    if gas and out.get("num_gpus"):
        model_parallel = 1
        for axis in ("tp", "pp", "cp"):
            model_parallel *= int(out.get(axis) or 1)
        dp = max(1, int(out["num_gpus"]) // model_parallel)
        gbs, mbs = out.get("global_batch_size"), out.get("micro_batch_size")
        if gbs is None:
            mbs = int(mbs or 1)
            out["global_batch_size"] = mbs * gas * dp
            cfg.notes.append(f"global batch {out['global_batch_size']} = micro-batch {mbs} × "
                             f"gradient_accumulation_steps {gas} × dp {dp}")
        elif mbs is None:
            if int(gbs) % (gas * dp):
                raise TrainsimError(FIELD, f"train_batch_size {gbs} is not divisible by gradient_accumulation_steps "
                                    f"{gas} × dp {dp}", "make train_batch_size = micro-batch × accumulation × dp")
            out["micro_batch_size"] = int(gbs) // (gas * dp)
            cfg.notes.append(f"micro-batch {out['micro_batch_size']} = train_batch_size {gbs} / "
                             f"(gradient_accumulation_steps {gas} × dp {dp})")
        elif int(gbs) != int(mbs) * gas * dp:
            if given.get("global_batch_size") is not None or given.get("micro_batch_size") is not None:
                cfg.notes.append(f"gradient_accumulation_steps {gas} ignored: the flags set the batch (global {gbs}, "
                                 f"micro-batch {mbs} on dp {dp})")
            else:
                raise TrainsimError(FIELD, f"train_batch_size {gbs} is not train_micro_batch_size_per_gpu {mbs} × "
                                    f"gradient_accumulation_steps {gas} × dp {dp} = {int(mbs) * gas * dp} (DeepSpeed "
                                    "refuses it too)", "make the three consistent, or give --gbs / --mbs / -n to match")
    if out.get("framework") is None:
        # AutoTP training and Ulysses sequence parallelism came with DeepSpeed 0.16.4 / 0.17
        parallel = any(int(cfg.options.get(axis) or 1) > 1 for axis in ("tp", "cp"))
        out["framework"] = "deepspeed@0.17" if parallel else "deepspeed"
    return out
