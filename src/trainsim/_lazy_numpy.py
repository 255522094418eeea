"""numpy imported on first use, so that modules the CLI loads at start-up (the schedule registry behind ``--help``)
do not pay for it. Use as ``from trainsim._lazy_numpy import np`` under ``if not TYPE_CHECKING``."""

from __future__ import annotations

import importlib
from typing import Any


class _LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        return getattr(module, attr)


np: Any = _LazyModule("numpy")
