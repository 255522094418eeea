"""Makespan of a schedule with given per-action durations and no communication (pure, no cost model).

Used to check schedules against their published bubble fractions and to explain schedules in the docs. Dependencies:
each stage runs its order sequentially; the forward of micro-batch ``b`` on virtual stage ``k`` waits for the forward
of ``b`` on ``k − 1``; its backward waits for the backward of ``b`` on ``k + 1`` (the last virtual stage starts the
backward right after its forward); a weight gradient waits for its backward (same stage, already ordered).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.schedule.base import BACKWARD, FORWARD, StageOrder


@dataclass(frozen=True)
class ScheduleTiming:
    """Start and end of every action (per stage, in order), the makespan and the bubble fraction."""

    start: tuple[tuple[float, ...], ...]
    end: tuple[tuple[float, ...], ...]
    makespan: float
    busy: tuple[float, ...]

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the makespan, averaged over stages."""
        p = len(self.busy)
        return 1.0 - sum(self.busy) / (p * self.makespan) if self.makespan else 0.0


def time_schedule(orders: tuple[StageOrder, ...], v: int = 1, f: float = 1.0, b: float = 2.0,
                  w: float = 0.0, p2p: float = 0.0, v_shape: bool = False) -> ScheduleTiming:
    """Time a schedule: ``f``, ``b``, ``w`` are the durations of one forward, backward and weight-gradient action of
    one chunk on any stage; ``p2p`` delays every hand-over between ranks; ``v_shape``: V placement (chunk 1 of rank
    ``s`` is virtual stage ``2p − 1 − s``, see :class:`~trainsim.schedule.pipeline.PipelineSchedule`)."""
    p = len(orders)
    last_vs = p * v - 1
    dur = (f, b, w)
    done: dict[tuple[int, int, int], float] = {}  # (kind, virtual stage, micro-batch) -> end
    pos = [0] * p
    clock = [0.0] * p
    starts: list[list[float]] = [[] for _ in range(p)]
    ends: list[list[float]] = [[] for _ in range(p)]
    kinds = [o.kind.tolist() for o in orders]
    mbs = [o.microbatch.tolist() for o in orders]
    chunks = [o.chunk.tolist() for o in orders]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(kinds[s]):
                i = pos[s]
                k, mb, c = kinds[s][i], mbs[s][i], chunks[s][i]
                vs = c * p + (p - 1 - s if v_shape and c % 2 else s)
                if k == FORWARD:
                    dep = (FORWARD, vs - 1, mb) if vs > 0 else None
                elif k == BACKWARD:
                    dep = (BACKWARD, vs + 1, mb) if vs < last_vs else (FORWARD, vs, mb)
                else:
                    dep = (BACKWARD, vs, mb)
                ready = 0.0
                if dep is not None:
                    if dep not in done:
                        break
                    dep_vs = dep[1]
                    dep_rank = dep_vs % p if not (v_shape and (dep_vs // p) % 2) else p - 1 - dep_vs % p
                    ready = done[dep] + (0.0 if dep_rank == s else p2p)
                t0 = max(clock[s], ready)
                t1 = t0 + dur[k]
                done[(k, vs, mb)] = t1
                starts[s].append(t0)
                ends[s].append(t1)
                clock[s] = t1
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("the schedule deadlocks: an action waits for one that never runs")
    makespan = max(clock)
    busy = tuple(sum(dur[k] for k in kinds[s]) for s in range(p))
    return ScheduleTiming(tuple(map(tuple, starts)), tuple(map(tuple, ends)), makespan, busy)
