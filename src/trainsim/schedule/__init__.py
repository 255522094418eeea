"""Pipeline schedules as pure functions (no costs): GPipe, 1F1B, interleaved 1F1B and zero-bubble ZB-H1.

``SCHEDULES`` maps the names of :data:`trainsim.spec.parallelism.Schedule` to functions ``(p, m, v) ->
tuple[StageOrder, ...]``; adding a schedule is one module and one line here. :func:`orders_for` gives the orders of a
job; :func:`bubble_fraction` the published closed forms on uniform stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError
from trainsim.schedule.base import (
    BACKWARD,
    FORWARD,
    KIND_NAMES,
    WEIGHT,
    Action,
    ScheduleFn,
    StageOrder,
    from_actions,
    make_order,
)
from trainsim.schedule.gpipe import gpipe
from trainsim.schedule.interleaved import interleaved
from trainsim.schedule.onef1b import onef1b
from trainsim.schedule.timing import ScheduleTiming, time_schedule
from trainsim.schedule.zero_bubble import zb_h1

if TYPE_CHECKING:
    from trainsim.spec.job import Job

SCHEDULES: dict[str, ScheduleFn] = {
    "gpipe": gpipe,
    "1f1b": onef1b,
    "interleaved": interleaved,
    "zb-h1": zb_h1,
}

#: Schedules whose backward is split into input-gradient (B) and weight-gradient (W) actions.
SPLIT_BACKWARD = frozenset({"zb-h1"})


def get_schedule(name: str) -> ScheduleFn:
    """The schedule function registered as ``name``."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise TrainsimError("parallelism.schedule", f"unknown schedule {name!r}",
                            f"use one of {', '.join(sorted(SCHEDULES))}") from None


def orders_for(job: Job) -> tuple[StageOrder, ...]:
    """Per-stage orders of a job (its schedule, pp, micro-batches and virtual stages)."""
    par = job.parallelism
    return get_schedule(job.schedule)(par.pp, job.num_microbatches, par.vpp)


def bubble_fraction(name: str, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
    """Published bubble fraction on uniform stages without communication.

    GPipe and 1F1B: ``(p − 1)/(m + p − 1)``; interleaved: ``(p − 1)/(v·m + p − 1)``; ZB-H1, with ``b`` the input-
    gradient and ``w`` the weight-gradient time: bubble ``(p − 1)(f + b − w)`` against ``m(f + b + w)`` of work.
    """
    get_schedule(name)
    if name in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if name == "interleaved":
        return (p - 1) / (v * m + p - 1)
    bubble = (p - 1) * (f + b - w)
    return bubble / (m * (f + b + w) + bubble)


__all__ = [
    "BACKWARD",
    "FORWARD",
    "KIND_NAMES",
    "SCHEDULES",
    "SPLIT_BACKWARD",
    "WEIGHT",
    "Action",
    "ScheduleFn",
    "ScheduleTiming",
    "StageOrder",
    "bubble_fraction",
    "from_actions",
    "get_schedule",
    "gpipe",
    "interleaved",
    "make_order",
    "onef1b",
    "orders_for",
    "time_schedule",
    "zb_h1",
]
