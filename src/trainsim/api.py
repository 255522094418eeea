"""The notebook-friendly entry point: ``trainsim.predict("llama3-8b", system="dgx-h100", num_gpus=8, tp=2, ...)``.

:func:`predict` takes either a validated :class:`~trainsim.spec.job.Job` or a model (preset name, ``config.json``
path or :class:`~trainsim.spec.model.Model`) plus keyword arguments named like the command-line flags
(``num_gpus``, ``tp``, ``pp``, ``vpp``, ``cp``, ``ep``, ``global_batch_size``/``gbs``, ``micro_batch_size``/``mbs``,
``seq_length``, ``recompute_granularity``, ``zero_stage``, ``use_distributed_optimizer``, ``precision`` ...; see
:data:`trainsim.cli.job_options.JOB_OPTIONS`). The job is built exactly as ``trainsim predict`` builds it, so the
Python and command-line answers are the same.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

from trainsim.errors import TrainsimError
from trainsim.predictor import Prediction
from trainsim.spec.job import Job
from trainsim.spec.model import Model

#: Short names accepted besides the job-option names.
ALIASES = {"gbs": "global_batch_size", "mbs": "micro_batch_size", "sp": "sequence_parallel"}
#: Keyword arguments passed to the event engine (see :func:`trainsim.engine.simulate_job`).
ENGINE_OPTIONS = frozenset({"slow_rank", "slow_stage", "slow_link", "seq_len_cv", "seed", "steps", "link_sharing",
                            "trace", "trace_detail", "memory_timeline", "export_ops", "export_meta"})
PRECISIONS = ("fp16", "bf16", "fp8", "fp32")


def job_from_kwargs(model: str | Path | Model | None = None, system: Any = None, **options: Any) -> Job:
    """A :class:`Job` from a model and flag-named keyword arguments (as ``trainsim predict`` builds it)."""
    from trainsim.cli.job_options import JOB_OPTIONS, job_from_options

    names = {o.name for o in JOB_OPTIONS}
    values: dict[str, Any] = {name: None for name in names}
    for p in PRECISIONS:
        values[p] = False
    for key, value in options.items():
        name = ALIASES.get(key, key)
        if name == "precision":
            if value not in PRECISIONS:
                raise TrainsimError("precision", f"unknown precision {value!r}", f"use one of {', '.join(PRECISIONS)}")
            values[value] = True
            continue
        if name not in names:
            close = difflib.get_close_matches(name, sorted(names | set(ALIASES) | {"precision"}), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "see trainsim.cli.job_options.JOB_OPTIONS"
            raise TrainsimError(key, "unknown job option", hint)
        values[name] = value
    values["model"] = model if isinstance(model, Model) or model is None else str(model)
    values["system"] = system
    return job_from_options(values)


def predict(job: Job | str | Path | Model, system: Any = None, *, engine: Literal["analytic", "event"] = "analytic",
            cost_model: Any = None, calibration: Any = None, flops_convention: str = "megatron",
            **options: Any) -> Prediction:
    """Predict a training job.

    ``predict(job)`` with a :class:`Job`, or ``predict("llama3-8b", system="dgx-h100", num_gpus=8, tp=2,
    global_batch_size=64, seq_length=8192)``: the model is a preset, a ``config.json`` path or a :class:`Model`;
    ``system`` a preset, a YAML path or a :class:`~trainsim.spec.system.System`; the other keywords are job options
    named like the CLI flags, or event-engine options (``slow_rank``, ``steps``, ``trace`` ...).
    """
    from trainsim.predictor import predict as predict_job

    engine_options = {k: v for k, v in options.items() if k in ENGINE_OPTIONS}
    job_options = {k: v for k, v in options.items() if k not in ENGINE_OPTIONS}
    if isinstance(job, Job):
        if system is not None or job_options:
            given = ", ".join(sorted(job_options)) or "system"
            raise TrainsimError("predict", f"{given} given with a Job", "change the Job, or pass a model name instead")
    else:
        job = job_from_kwargs(job, system, **job_options)
    return predict_job(job, engine=engine, cost_model=cost_model, calibration=calibration,
                       flops_convention=flops_convention, **engine_options)  # type: ignore[arg-type]
