"""Shared output helpers for the CLI: JSON printing and unit formatting (SI inside, readable at the edge)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def print_json(data: Any) -> None:
    """Print one JSON object on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False, default=_default) + "\n")


def _default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def fmt_seconds(s: float) -> str:
    """Seconds in a readable unit."""
    if not math.isfinite(s):
        return str(s)
    if s >= 86400 * 2:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_bytes(b: float) -> str:
    """Bytes in GB (1e9)."""
    return f"{b / 1e9:.1f} GB"


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
