"""Readable units at the edges (SI inside): used by the CLI, the search report and the HTML reports."""

from __future__ import annotations

import math


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
