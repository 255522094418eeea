"""The one error type for invalid user input.

Every invalid input raises :class:`TrainsimError` carrying the field path and a fix hint. The CLI prints it on one line
and exits with code 2; the Python API lets it propagate (it is a ``ValueError``).
"""

from __future__ import annotations

import warnings
from pathlib import Path


class TrainsimError(ValueError):
    """Invalid user input: names the offending field and how to fix it."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        self.field = field
        self.message = message
        self.hint = hint
        text = f"{field}: {message}"
        if hint:
            text += f" (fix: {hint})"
        super().__init__(text)


class TrainsimWarning(UserWarning):
    """A suspicious but allowed input (e.g. tensor parallelism across nodes)."""


def warn(field: str, message: str) -> None:
    """Emit a :class:`TrainsimWarning` naming the field."""
    warnings.warn(f"{field}: {message}", TrainsimWarning, stacklevel=3)


def read_text(path: Path, field: str, missing_fix: str, unreadable_fix: str = "check the file") -> str:
    """The text of a user's input file; a missing or unreadable file is a :class:`TrainsimError` on ``field``."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise TrainsimError(field, f"file not found: {path}", missing_fix) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainsimError(field, f"cannot read {path} ({exc})", unreadable_fix) from None
