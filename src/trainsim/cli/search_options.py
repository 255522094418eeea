"""Build a :class:`~trainsim.search.space.SearchSpace` from the command-line job flags given as text (a CLI concern:
the search package itself never imports the CLI).

Search dimensions (``--num-gpus --tp --pp --vpp --cp --ep --etp --dp --mbs --schedule --recompute-granularity
--zero-stage --rank-order``, and ``--sequence-parallel``/``--sp``) accept lists, ranges and ``all``; every other flag
takes one value and is parsed as ``trainsim predict`` parses it (same validation, same presets).
"""

from __future__ import annotations

from typing import Any

from trainsim.cli.job_options import JOB_OPTIONS, option
from trainsim.errors import TrainsimError
from trainsim.search.space import SearchSpace

#: job flag name → search dimension (from the ``dimension`` of the spec fields' flags; ``--sequence-parallel`` is a
#: switch, searched through ``--sp``)
DIMENSION_FLAGS: dict[str, str] = {o.name: o.dimension for o in JOB_OPTIONS if o.dimension and not o.is_switch}
# Training flags whose validity depends on searched dimensions: kept out of the base job, put back in the template.
_DEFERRED = ("tp_comm_overlap", "overlap_param_gather", "recompute_num_layers", "optimizer_cpu_offload",
             "param_cpu_offload")
_PIPELINE_SPLIT = ("first_stage_layers", "last_stage_layers")


def _flag(name: str) -> str:
    return option(name).flags[0]


def _dimension_flags() -> str:
    flags = [[f for f in option(name).flags if f.startswith("--")][-1] for name in DIMENSION_FLAGS]
    return " ".join([*flags, "--sp"])


def typed_value(name: str, value: Any) -> Any:
    """Convert one non-search flag's text to its type, refusing lists and ranges."""
    opt = option(name)
    if value is None or opt.kind is bool or not isinstance(value, str):
        return value
    text = value.strip()
    if opt.kind in (int, float) and ("," in text or ".." in text or ":" in text):
        raise TrainsimError(name, f"{_flag(name)} takes one value (got {value!r})",
                            f"lists and ranges are only accepted for the search dimensions ({_dimension_flags()})")
    if opt.kind is int:
        try:
            number = float(text)
        except ValueError:
            raise TrainsimError(name, f"{_flag(name)} expects a whole number (got {value!r})",
                                "give an integer") from None
        if not number.is_integer():
            raise TrainsimError(name, f"{_flag(name)} expects a whole number (got {value!r})", "give an integer")
        return int(number)
    if opt.kind is float:
        try:
            return float(text)
        except ValueError:
            raise TrainsimError(name, f"{_flag(name)} expects a number (got {value!r})", "e.g. 300e9") from None
    return text


def space_from_options(values: dict[str, Any], others: str = "open", sp: str | None = None) -> SearchSpace:
    """A search space from job flag values (text for non-boolean flags, as ``with_job_options(as_text=True)``)."""
    from trainsim.cli.job_options import job_from_options

    if others not in ("open", "default"):
        raise TrainsimError("others", f"unknown mode {others!r}", "use open or default")
    dims: dict[str, Any] = {}
    base: dict[str, Any] = {}
    deferred: dict[str, Any] = {}
    for name, value in values.items():
        if name in DIMENSION_FLAGS:
            if value is not None:
                dims[DIMENSION_FLAGS[name]] = value
        elif name in ("sequence_parallel", "use_distributed_optimizer"):
            continue
        elif name in _DEFERRED:
            deferred[name] = typed_value(name, value)
        else:
            base[name] = typed_value(name, value)
    split = {k: base.pop(k) for k in _PIPELINE_SPLIT if k in base}
    if values.get("sequence_parallel"):
        if sp is not None and sp.strip().lower() not in ("true", "1", "yes", "on"):
            raise TrainsimError("sequence_parallel", "--sequence-parallel contradicts --sp " + sp,
                                "give one of them")
        sp = "true"
    if sp is not None:
        dims["sequence_parallel"] = sp
    if values.get("use_distributed_optimizer"):
        if "zero_stage" not in dims:
            dims["zero_stage"] = "1"
        else:
            from trainsim.search.space import OPEN, parse_values

            zs = parse_values(dims["zero_stage"], "zero_stage")
            if zs == OPEN:
                dims["zero_stage"] = "1:3"
            elif zs is not None and 0 in zs:
                raise TrainsimError("zero_stage", "--use-distributed-optimizer is ZeRO stage 1 or more, but "
                                    "--zero-stage lists 0", "drop 0 from --zero-stage or drop the flag")
    # Build and validate the base job (tp = pp = 1, one replica) for the model, system and training settings.
    probe = job_from_options({**base, "num_gpus": None})
    update = {k: v for k, v in deferred.items() if v not in (None, False)}
    training = probe.training.model_copy(update=update) if update else probe.training
    if update:
        from trainsim.spec.training import Training

        training = Training(**training.model_dump())  # validate the deferred settings' own values
    return SearchSpace(model=probe.model, system=probe.system, training=training, others=others,
                       framework=probe.framework,
                       first_stage_layers=split.get("first_stage_layers"),
                       last_stage_layers=split.get("last_stage_layers"), **dims)


def load_calibration(path: str, generation: str) -> Any:
    """Calibration constants from a YAML file, on top of the fitted ones for a GPU generation."""
    from pathlib import Path

    import yaml

    from trainsim.cost.calibration import calibration_for, calibration_from_mapping

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TrainsimError("calibration", f"cannot read {path} ({exc})".replace("\n", " "),
                            "give a YAML file") from None
    if not isinstance(data, dict):
        raise TrainsimError("calibration", f"{path} is not a mapping", "map constant names to values")
    return calibration_from_mapping(data, calibration_for(generation))
