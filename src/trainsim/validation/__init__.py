"""Validation against published measurements, and calibration of the analytic constants.

``run_validation(measurements=None)`` predicts every measured row (the packaged published table and the single-H100
steps, or any CSV/Parquet file in the same schema) and returns a :class:`~trainsim.validation.report.ValidationReport`;
``load_table(path=None)`` / ``load_measurements(path=None)`` read a file's rows as jobs (see
:mod:`trainsim.validation.measurements`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainsim.validation.measurements import load_measurements, load_table
    from trainsim.validation.report import run_validation

_EXPORTS = {"run_validation": "trainsim.validation.report", "load_table": "trainsim.validation.measurements",
            "load_measurements": "trainsim.validation.measurements"}
__all__ = ["load_measurements", "load_table", "run_validation"]


def __getattr__(name: str) -> Any:
    """Import the public functions lazily (the report module imports the predictor)."""
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
