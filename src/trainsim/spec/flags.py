"""Command-line flags as metadata of the spec fields, so that flags, Megatron names and search dimensions cannot
drift from the specification.

A field declares its flag with :class:`Flag` in its ``Annotated`` metadata (Megatron-LM's name first, then short
aliases)::

    num_layers: Annotated[int, Flag("--num-layers", help="transformer layers")] = Field(gt=0)
    add_bias_linear: Annotated[bool, Flag("--disable-bias-linear", const=False, help="...")] = True

A field may carry several flags (``precision``: ``--fp16``, ``--bf16``, ``--fp8``, ``--fp32``); a field that is
deliberately not a flag says why with :class:`NoFlag`. :func:`spec_flags` lists every flag of a spec class, and
``trainsim.cli.job_options`` turns them into the Typer options of ``predict`` and ``search`` (and the flags that
``--megatron-args`` understands). A test walks every field of :class:`~trainsim.spec.model.Model`,
:class:`~trainsim.spec.parallelism.Parallelism` and :class:`~trainsim.spec.training.Training` and fails when one has
neither.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

#: Marker: a flag that takes a value (as opposed to a switch that sets its field to ``const``).
VALUE = object()


@dataclass(frozen=True)
class Flag:
    """A command-line flag of a spec field.

    ``names``: the flags, Megatron-LM's spelling first (then aliases, e.g. ``"--tp"``). ``const``: a switch that
    sets the field to this value (a boolean field's flag is a switch to ``True`` unless ``const`` says otherwise);
    without it the flag takes a value. ``param``: the Python name of the option (default: the field name for a value
    flag, the first flag's name for a switch: ``--disable-bias-linear`` → ``disable_bias_linear``).
    ``unit``: shown in the help. ``scale``: the field value is the flag value times ``scale`` (e.g. Gb/s → bytes/s).
    ``dimension``: the search dimension the flag feeds (``search`` accepts lists and ranges for it).
    ``megatron``: ``False`` for a trainsim-only flag (Megatron-LM has no such argument). ``help`` may be a callable
    (read when the options are built, e.g. from a registry that grows).
    """

    names: tuple[str, ...]
    help: str | Callable[[], str]
    const: Any = VALUE
    param: str | None = None
    unit: str | None = None
    scale: float | None = None
    dimension: str | None = None
    megatron: bool = True
    default: Any = None

    def __init__(self, *names: str, help: str | Callable[[], str], const: Any = VALUE, param: str | None = None,
                 unit: str | None = None, scale: float | None = None, dimension: str | None = None,
                 megatron: bool = True, default: Any = None) -> None:
        if not names or not all(n.startswith("-") for n in names):
            raise ValueError(f"flag names must start with '-' (got {names!r})")
        for key, value in (("names", names), ("help", help), ("const", const), ("param", param), ("unit", unit),
                           ("scale", scale), ("dimension", dimension), ("megatron", megatron), ("default", default)):
            object.__setattr__(self, key, value)

    @property
    def is_switch(self) -> bool:
        """Whether the flag takes no value (it sets its field to :attr:`const`)."""
        return self.const is not VALUE


@dataclass(frozen=True)
class NoFlag:
    """A spec field deliberately without a command-line flag, and why (e.g. descriptive metadata)."""

    reason: str


@dataclass(frozen=True)
class FieldFlag:
    """One flag resolved against its field: what ``trainsim.cli.job_options`` turns into an option."""

    flag: Flag
    spec: type  # the spec class
    field: str  # the field name in that class
    kind: type  # int, float, str or bool (the option's type)
    choices: tuple[str, ...] | None  # a Literal field's values
    multiple: bool = False  # a tuple field: the flag takes a comma-separated list

    @property
    def param(self) -> str:
        """Python name of the option."""
        if self.flag.param:
            return self.flag.param
        if self.const is VALUE:
            return self.field
        return self.flag.names[0].lstrip("-").replace("-", "_")

    @property
    def option_kind(self) -> type:
        """Type of the command-line option: ``bool`` for a switch, else the field's :attr:`kind`."""
        return bool if self.const is not VALUE else self.kind

    @property
    def const(self) -> Any:
        """The value a switch sets (``True`` for a plain boolean flag); :data:`VALUE` for a value flag."""
        if self.flag.is_switch:
            return self.flag.const
        return True if self.kind is bool else VALUE

    @property
    def help(self) -> str:
        """Help text with the unit and the choices of a ``Literal`` field."""
        text = self.flag.help if isinstance(self.flag.help, str) else self.flag.help()
        if self.flag.unit:
            text += f" [{self.flag.unit}]"
        if self.choices and self.const is VALUE and not any(c in text for c in self.choices):
            text += f": {', '.join(self.choices)}"
        return text


def _strip_optional(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _kind(annotation: Any) -> tuple[type, tuple[str, ...] | None, bool]:
    """The option type, the choices and whether it is a list, from a field annotation (``int | None`` → int;
    ``Literal[...]`` → str; ``tuple[Literal[...], ...]`` → a comma-separated str)."""
    ann = _strip_optional(annotation)
    if get_origin(ann) is tuple:
        inner = get_args(ann)[0]
        return str, tuple(str(v) for v in get_args(inner)) if get_origin(inner) is Literal else None, True
    if get_origin(ann) is Literal:
        return str, tuple(str(v) for v in get_args(ann)), False
    if ann in (bool, int, float, str):
        return ann, None, False
    return str, None, False


def field_flags(spec: type, name: str) -> tuple[FieldFlag, ...]:
    """The flags a field of a pydantic spec class declares (empty: none)."""
    info = spec.model_fields[name]  # type: ignore[attr-defined]
    kind, choices, multiple = _kind(info.annotation)
    return tuple(FieldFlag(m, spec, name, kind, choices, multiple) for m in info.metadata if isinstance(m, Flag))


def no_flag_reason(spec: type, name: str) -> str | None:
    """Why a field has no flag (its :class:`NoFlag`), or ``None``."""
    info = spec.model_fields[name]  # type: ignore[attr-defined]
    return next((m.reason for m in info.metadata if isinstance(m, NoFlag)), None)


def spec_flags(spec: type) -> tuple[FieldFlag, ...]:
    """Every flag of a spec class, in field order."""
    return tuple(f for name in spec.model_fields for f in field_flags(spec, name))  # type: ignore[attr-defined]
