"""Typed access to pandas frames: rows as named tuples whose fields say the column types.

pandas types a cell as a broad scalar union (string, number, timestamp, NA ...), so code that reads rows with
``itertuples`` gets no checking of what it does with them. :func:`rows_as` reads the columns a ``NamedTuple``
names, in its field order, and returns each row as that tuple: the same Python values ``itertuples`` gives,
typed by the row class the caller declares next to the table's schema. :func:`as_int` and :func:`as_float` convert
a single cell or group key (typed ``Hashable`` or a scalar union by pandas) exactly as ``int()`` and ``float()`` do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, SupportsFloat, SupportsInt, TypeVar, cast

import pandas as pd

Row = TypeVar("Row", bound=NamedTuple)


def rows_as(df: pd.DataFrame, row_type: type[Row]) -> Iterator[Row]:
    """The rows of ``df`` as ``row_type``, a ``NamedTuple`` whose field names are columns of ``df``."""
    for values in df[list(row_type._fields)].itertuples(index=False, name=None):
        yield row_type._make(values)


def as_int(value: object) -> int:
    """``int(value)`` for a pandas cell or group key known to hold a number."""
    return int(cast(SupportsInt, value))


def as_float(value: object) -> float:
    """``float(value)`` for a pandas cell or group key known to hold a number."""
    return float(cast(SupportsFloat, value))
