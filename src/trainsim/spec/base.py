"""Base class for validated, immutable specification objects."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from trainsim.errors import TrainsimError


def _field_path(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    parts += [str(p) for p in loc if p != "__root__"]
    return ".".join(parts) or prefix or "input"


def to_trainsim_error(exc: ValidationError, prefix: str = "") -> TrainsimError:
    """Turn the first error of a pydantic ``ValidationError`` into a :class:`TrainsimError`."""
    err = exc.errors(include_url=False)[0]
    original = (err.get("ctx") or {}).get("error")
    loc = tuple(err.get("loc", ()))
    if isinstance(original, TrainsimError):
        if not loc and not prefix:
            return original
        parts = _field_path(prefix, loc).split(".") + original.field.split(".")
        merged = [p for i, p in enumerate(parts) if i == 0 or p != parts[i - 1]]
        return TrainsimError(".".join(merged), original.message, original.hint)
    field = _field_path(prefix, loc)
    kind = err.get("type", "")
    msg = err.get("msg", "invalid value")
    value = err.get("input")
    if kind == "extra_forbidden":
        return TrainsimError(field, "unknown field", "remove it or check the spelling against the documented fields")
    if kind == "missing":
        return TrainsimError(field, "is required", "give a value")
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    ctx = err.get("ctx") or {}
    if kind in ("less_than_equal", "less_than"):
        limit = ctx.get("le", ctx.get("lt"))
        return TrainsimError(field, f"{msg} (got {shown})",
                             f"give a realistic value (at most {limit:,}; limits in trainsim.spec.limits)"
                             if isinstance(limit, int | float) else "give a realistic value")
    if kind == "finite_number":
        return TrainsimError(field, f"must be a finite number (got {shown})", "give a finite value")
    return TrainsimError(field, f"{msg} (got {shown})", "give a valid value")


class Spec(BaseModel, frozen=True):
    """Frozen pydantic model whose validation errors are :class:`TrainsimError`.

    Subclasses repeat ``frozen=True`` in the class line: pydantic inherits it anyway, but type checkers read it
    per class to know that the model is hashable (specs key caches).
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise to_trainsim_error(exc, _spec_prefix(type(self))) from None

    def replace(self, **changes: Any) -> Any:
        """A validated copy with some fields changed."""
        return type(self)(**{**self.model_dump(), **changes})


def _spec_prefix(cls: type) -> str:
    return {"Model": "model", "System": "system", "Parallelism": "parallelism", "Training": "training",
            "Framework": "framework", "GPU": "system.gpu", "PeakFlops": "system.gpu.peak_flops",
            "Node": "system.node", "Network": "system.network"}.get(cls.__name__, "")
