"""The one error type for invalid user input.

Every invalid input raises :class:`TrainsimError` carrying the field path and a fix hint. The CLI prints it on one line
and exits with code 2; the Python API lets it propagate (it is a ``ValueError``).
"""

from __future__ import annotations

import warnings


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
