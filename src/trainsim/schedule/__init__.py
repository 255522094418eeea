"""Pipeline schedules: one class per schedule, registered by name.

``SCHEDULES`` maps each ``--schedule`` name to its :class:`PipelineSchedule` (callable as ``(p, m, v) ->
tuple[StageOrder, ...]``); adding a schedule is one module and one line here — the spec's ``Schedule`` literal, the
search domain and the CLI help are read from this registry. :func:`orders_for` gives the orders of a job;
:func:`bubble_fraction` the published closed forms on uniform stages.
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
from trainsim.schedule.dualpipev import DualPipeV
from trainsim.schedule.gpipe import GPipe, gpipe
from trainsim.schedule.interleaved import Interleaved, interleaved
from trainsim.schedule.onef1b import OneF1B, onef1b
from trainsim.schedule.pipeline import P2PMode, PipelineSchedule
from trainsim.schedule.timing import ScheduleTiming, time_schedule
from trainsim.schedule.zbv import ZBV
from trainsim.schedule.zero_bubble import ZBH1, zb_h1

if TYPE_CHECKING:
    from trainsim.spec.job import Job

SCHEDULES: dict[str, PipelineSchedule] = {s.name: s for s in (
    OneF1B(),
    GPipe(),
    Interleaved(),
    ZBH1(),
    ZBV(),
    DualPipeV(),
)}

SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)

#: Schedules whose backward is split into input-gradient (B) and weight-gradient (W) actions.
SPLIT_BACKWARD = frozenset(name for name, s in SCHEDULES.items() if s.split_backward)


def get_schedule(name: str) -> PipelineSchedule:
    """The schedule registered as ``name``."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise TrainsimError("parallelism.schedule", f"unknown schedule {name!r}",
                            f"use one of {', '.join(SCHEDULE_NAMES)}") from None


def default_schedule(vpp: int) -> str:
    """The schedule used when none is given: interleaved 1F1B with virtual stages, else 1F1B."""
    return "interleaved" if vpp > 1 else "1f1b"


def searched_schedules(vpp: int) -> tuple[str, ...]:
    """Open search domain for ``vpp`` chunks per rank: the registered schedules that accept it and are searched by
    default (GPipe is left out: 1F1B's bubble with every micro-batch in flight)."""
    out = []
    for name, s in SCHEDULES.items():
        if s.accepts_chunks(vpp) and (s.searched or (vpp > 1 and s.interleaves)):
            out.append(name)
    return tuple(out)


def schedule_help() -> str:
    """One line per schedule, for ``--help``."""
    return "; ".join(f"{name}: {s.summary}" for name, s in SCHEDULES.items())


def orders_for(job: Job) -> tuple[StageOrder, ...]:
    """Per-stage orders of a job (its schedule, pp, micro-batches and virtual stages)."""
    par = job.parallelism
    return job.pipeline.orders(par.pp, job.num_microbatches, par.vpp)


def bubble_fraction(name: str, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
    """Published bubble fraction of schedule ``name`` on uniform stages without communication (see
    :meth:`PipelineSchedule.bubble_fraction`)."""
    return get_schedule(name).bubble_fraction(p, m, v, f, b, w)


__all__ = [
    "BACKWARD",
    "FORWARD",
    "KIND_NAMES",
    "SCHEDULES",
    "SCHEDULE_NAMES",
    "SPLIT_BACKWARD",
    "WEIGHT",
    "Action",
    "P2PMode",
    "PipelineSchedule",
    "ScheduleFn",
    "ScheduleTiming",
    "StageOrder",
    "bubble_fraction",
    "default_schedule",
    "from_actions",
    "get_schedule",
    "gpipe",
    "interleaved",
    "make_order",
    "onef1b",
    "orders_for",
    "schedule_help",
    "searched_schedules",
    "time_schedule",
    "zb_h1",
]
