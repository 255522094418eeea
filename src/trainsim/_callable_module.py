"""Packages whose main function shares their name (``trainsim.search``, ``trainsim.plan``) stay callable.

``import trainsim.search`` makes ``trainsim.search`` the package, hiding the function of the same name that
``trainsim.search(...)`` means in a notebook. :func:`make_callable` gives such a package a ``__call__`` that runs the
function, so both ``trainsim.search(space)`` and ``trainsim.search.SearchSpace`` work.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def make_callable(module_name: str, function: Callable[..., Any]) -> None:
    """Make the module ``module_name`` callable as ``function``."""

    class _Callable(types.ModuleType):
        __doc__ = function.__doc__

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    sys.modules[module_name].__class__ = _Callable
