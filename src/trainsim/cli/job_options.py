"""The job flags shared by ``predict``, ``search`` and other commands, generated from the spec fields.

Every flag is declared once, as :class:`~trainsim.spec.flags.Flag` metadata of the spec field it sets (Megatron-LM
names first, then aliases; help text and unit beside the field): :data:`JOB_OPTIONS` walks the fields of
:class:`~trainsim.spec.job.Job`, :class:`~trainsim.spec.model.Model`, the system
(:class:`~trainsim.spec.system.System`, its node and network), :class:`~trainsim.spec.parallelism.Parallelism`,
:class:`~trainsim.spec.training.Training` and :class:`~trainsim.spec.framework.Framework`, so a flag cannot drift from
its field. :func:`with_job_options` adds every flag to a Typer command, grouped in help panels by section; the
command receives them as ``job_options: dict[str, Any]`` and turns them into a :class:`~trainsim.spec.job.Job` with
:func:`job_from_options`. With ``as_text=True`` every flag is a string, so that ``search`` can accept lists
(``--tp 4,8,16``) and ranges.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand

from trainsim.errors import TrainsimError
from trainsim.spec.flags import VALUE, FieldFlag, spec_flags


@dataclass(frozen=True)
class JobOption:
    """One command-line flag and the spec field it sets (built from the field's :class:`~trainsim.spec.flags.Flag`)."""

    name: str  # python parameter name
    flags: tuple[str, ...]
    kind: type  # int, float, str or bool
    section: str  # job | model | system | system.node | system.network | parallelism | training | framework
    field: str  # field in that section
    help: str
    default: Any = None
    const: Any = VALUE  # a switch sets its field to this value; VALUE: the flag takes a value
    scale: float | None = None  # field value = flag value × scale (unit conversion)
    dimension: str | None = None  # search dimension fed by this flag
    megatron: bool = True  # Megatron-LM has this flag
    choices: tuple[str, ...] | None = None
    multiple: bool = False  # a comma-separated list (a tuple field)

    @property
    def is_switch(self) -> bool:
        """Whether the flag takes no value."""
        return self.const is not VALUE

    @property
    def inverted(self) -> bool:
        """A switch that turns its field off (Megatron's ``--no-...``/``--disable-...`` style)."""
        return self.const is False

    @property
    def panel(self) -> str:
        """Help panel (section) the flag is listed under."""
        return PANELS[self.section]


#: Help panel of each section, in the order ``--help`` lists them.
PANELS: dict[str, str] = {"job": "Job", "model": "Model", "system": "System", "system.node": "System",
                          "system.network": "System", "parallelism": "Parallelism", "training": "Training",
                          "framework": "Framework (software stack)"}


def _spec_sections() -> tuple[tuple[str, type], ...]:
    from trainsim.spec.framework import Framework
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model
    from trainsim.spec.parallelism import Parallelism
    from trainsim.spec.system import Network, Node, System
    from trainsim.spec.training import Training

    return (("job", Job), ("model", Model), ("system.node", Node), ("system.network", Network), ("system", System),
            ("parallelism", Parallelism), ("training", Training), ("framework", Framework))


def _option(section: str, f: FieldFlag) -> JobOption:
    return JobOption(f.param, f.flag.names, f.option_kind, section, f.field, f.help, f.flag.default, f.const,
                     f.flag.scale, f.flag.dimension, f.flag.megatron, f.choices, f.multiple)


def _build_options() -> tuple[JobOption, ...]:
    out = tuple(_option(section, f) for section, spec in _spec_sections() for f in spec_flags(spec))
    seen: dict[str, JobOption] = {}
    for o in out:
        for key in (o.name, *o.flags):
            if key in seen:
                raise RuntimeError(f"{key} declared twice ({seen[key].section}.{seen[key].field} and "
                                   f"{o.section}.{o.field})")
            seen[key] = o
    return out


#: Every job flag, in panel order: built from the spec fields' :class:`~trainsim.spec.flags.Flag` metadata.
JOB_OPTIONS: tuple[JobOption, ...] = _build_options()
_BY_NAME = {o.name: o for o in JOB_OPTIONS}
#: Option names of the precision switches (``--fp16`` ...), in declaration order.
PRECISION_FLAGS = tuple(o.name for o in JOB_OPTIONS if o.section == "training" and o.field == "precision")


def fill_unset(given: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Job option values from a file (a launch script, a DeepSpeed configuration) where the flags given to trainsim
    left them unset (``None``/``False``); a precision flag given to trainsim replaces the file's precision."""
    out = dict(given)
    precision_given = any(given.get(p) for p in PRECISION_FLAGS)
    for name, value in values.items():
        if (name in PRECISION_FLAGS and precision_given) or out.get(name) not in (None, False):
            continue
        out[name] = value
    return out


def option(name: str) -> JobOption:
    """The job option called ``name`` (its Python name)."""
    return _BY_NAME[name]


def dimension_options() -> dict[str, str]:
    """Option name → search dimension, for the flags that feed a search dimension."""
    return {o.name: o.dimension for o in JOB_OPTIONS if o.dimension}


#: Options with a default that a launch script may set (``--deepspeed`` selects Megatron-DeepSpeed): left unset on
#: the command line unless given, the default applied where the job is built.
SCRIPT_SETTABLE = frozenset({"framework"})


def _parameter(opt: JobOption, as_text: bool) -> inspect.Parameter:
    if opt.kind is bool:
        annotation: Any = bool
        default = typer.Option(False, *opt.flags, help=opt.help, show_default=False, rich_help_panel=opt.panel)
    elif opt.name in SCRIPT_SETTABLE and opt.default is not None:
        # unset (None) unless given, so that a --megatron-args script can set it; the help shows the default
        annotation = str | None
        default = typer.Option(None, *opt.flags, help=opt.help, show_default=str(opt.default),
                               rich_help_panel=opt.panel)
    else:
        annotation = str | None if as_text else opt.kind | None
        default = typer.Option(opt.default if not as_text or opt.default is None else str(opt.default),
                               *opt.flags, help=opt.help, rich_help_panel=opt.panel)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def with_job_options(as_text: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: add the job flags to a Typer command, which receives them as ``job_options``.

    A parameter of the command itself with a job flag's name (e.g. ``profile --attention-backend``, the SDPA
    backend to measure) takes precedence: that job flag is not added. Use ``cls=JobCommand`` (or a subclass) on the
    command to list the flags in panels by section.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(func)
        own = [p for p in sig.parameters.values() if p.name != "job_options"]
        own_names = {p.name for p in own}
        added = [o for o in JOB_OPTIONS if o.name not in own_names]
        names = {o.name for o in added}

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            job_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
            return func(job_options=job_kwargs, **kwargs)

        params = own + [_parameter(o, as_text) for o in added]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        return wrapper

    return decorate


class JobCommand(TyperCommand):
    """A command whose ``--help`` lists the job flags in one section per panel (Job, Model, System, Parallelism,
    Training, Framework) after the command's own options (with ``rich`` installed, Typer draws the same panels)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or param.param_type_name != "option":
                continue
            groups.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        order = ["Options", *dict.fromkeys(PANELS.values())]
        for panel in sorted(groups, key=lambda p: order.index(p) if p in order else len(order)):
            with formatter.section(panel if panel == "Options" else f"{panel} options"):
                formatter.write_dl(groups[panel])


def _field_path(opt: JobOption) -> str:
    return f"{opt.section}.{opt.field}"


def _distributed_optimizer(values: dict[str, Any]) -> None:
    """Megatron's ``--use-distributed-optimizer`` is ZeRO stage 1 or more: a ``--zero-stage`` of 1..3 wins."""
    if values.get("use_distributed_optimizer") and values.get("zero_stage") is not None:
        if values["zero_stage"] < 1:
            raise TrainsimError("training.zero_stage", "--use-distributed-optimizer is ZeRO stage 1",
                                "drop --zero-stage 0 or --use-distributed-optimizer")
        values["use_distributed_optimizer"] = False


def section_values(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Flag values (``None``/``False`` = not given) as field values per section (switches resolved to their
    constant, units converted); two flags that set one field to different values are an error."""
    values = dict(values)
    _distributed_optimizer(values)
    sections: dict[str, dict[str, Any]] = {s: {} for s in PANELS}
    given: dict[str, tuple[Any, str]] = {}
    for name, value in values.items():
        opt = _BY_NAME[name]
        if opt.section == "job" or value is None or value is False:
            continue
        if opt.is_switch:
            value = opt.const
        elif opt.multiple:
            value = tuple(v for v in str(value).replace(",", " ").split() if v)
        elif opt.scale is not None:
            value = value * opt.scale
        path = _field_path(opt)
        if path in given and given[path][0] != value:
            raise TrainsimError(path, f"{given[path][1]} and {opt.flags[0]} contradict", "give one of them")
        given[path] = (value, opt.flags[0])
        sections[opt.section][opt.field] = value
    if values.get("fp8_recipe") and "precision" not in sections["training"]:
        sections["training"]["precision"] = "fp8"  # a recipe only exists for FP8 training
    return sections


def job_from_options(values: dict[str, Any]):  # type: ignore[no-untyped-def]  # -> Job (lazy import)
    """Build a validated :class:`~trainsim.spec.job.Job` from flag values (``None``/``False`` = not given)."""
    from trainsim.spec.job import Job
    from trainsim.spec.model import Model
    from trainsim.spec.parallelism import Parallelism
    from trainsim.spec.presets import load_model, load_system
    from trainsim.spec.training import Training

    sections = section_values(values)
    if "global_batch_size" not in sections["training"]:
        raise TrainsimError("training.global_batch_size", "is required", "give --global-batch-size (or --gbs)")

    # model: a preset/file, possibly overridden by explicit flags, or built from the flags alone
    model_ref = values.get("model")
    overrides = sections["model"]
    if model_ref:
        model = load_model(model_ref)
        if overrides:
            model = model.replace(**overrides)
    else:
        missing = [f for f in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size") if f not in overrides]
        if missing:
            flags = ", ".join(option(m).flags[0] for m in missing)
            raise TrainsimError("model", "no --model preset and the architecture flags are incomplete",
                                f"give --model NAME or also {flags}")
        if "seq_length" not in overrides and "seq_length" in sections["training"]:
            overrides["seq_length"] = sections["training"]["seq_length"]  # Megatron: max positions default to it
        model = Model(**overrides)

    system = load_system(values.get("system") or option("system").default)
    node, network, top = sections["system.node"], sections["system.network"], sections["system"]
    if node or network or top:
        system = system.replace(node=system.node.replace(**node) if node else system.node,
                                network=system.network.replace(**network) if network else system.network, **top)
    return Job(
        model=model,
        system=system,
        parallelism=Parallelism(**sections["parallelism"]),
        training=Training(**sections["training"]),
        num_gpus=values.get("num_gpus"),
        framework=framework_from_options(values.get("framework"), sections["framework"]),
    )


def framework_from_options(name: str | None, overrides: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The framework profile ``name`` (default megatron-core) with the individual flags applied.

    ``--transformer-impl local`` also selects Megatron's local attention (the local layer spec) unless
    ``--attention-backend`` is given; ``--enable-cuda-graph`` removes the host dispatch cost per kernel.
    """
    from trainsim.spec.framework import load_framework

    fw = load_framework(name)
    if not overrides:
        return fw
    over = dict(overrides)
    if over.get("transformer_impl") == "local" and "attention_backend" not in over:
        over["attention_backend"] = "local"
    if over.get("cuda_graphs"):
        over["host_dispatch_s"] = 0.0
    return fw.replace(**over)
