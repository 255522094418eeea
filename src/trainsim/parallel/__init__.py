"""The parallel strategy layer: axes, communication groups and the rank layout.

:mod:`trainsim.parallel.axes` names the axes (:class:`Axis`) and groups (:class:`Group`) and holds the axis checks;
:mod:`trainsim.parallel.layout` owns degrees, rank order, strides and the placement of every group
(:class:`Layout`, :class:`Placement`).
"""

from __future__ import annotations

from trainsim.parallel.axes import DEFAULT_RANK_ORDER, Axis, Group, parse_rank_order
from trainsim.parallel.layout import Layout, Placement, Placements, placements_of

__all__ = ["DEFAULT_RANK_ORDER", "Axis", "Group", "Layout", "Placement", "Placements", "parse_rank_order",
           "placements_of"]
