"""Shared output helpers for the CLI: JSON printing and unit formatting (SI inside, readable at the edge)."""

from __future__ import annotations

import json
import sys
from typing import Any

from trainsim.units import fmt_bytes, fmt_seconds

__all__ = ["check_outputs", "fmt_bytes", "fmt_seconds", "print_json"]


def print_json(data: Any) -> None:
    """Print one JSON object on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False, default=_default) + "\n")


def _default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def check_outputs(files: dict[str, Any], directories: dict[str, Any] | None = None) -> None:
    """Check every output path of a command before it computes anything (flag name → path; ``None``: not given).

    A missing directory, a directory given as a file (or the reverse) or an unwritable location raises one
    :class:`~trainsim.errors.TrainsimError` naming the flag, so a typo costs nothing but a one-line error.
    """
    from trainsim.io.atomic import check_output_path

    for flag, path in files.items():
        if path is not None:
            check_output_path(path, flag)
    for flag, path in (directories or {}).items():
        if path is not None:
            check_output_path(path, flag, directory=True)
