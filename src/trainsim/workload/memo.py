"""Memoising pure functions of one :class:`~trainsim.spec.job.Job` for the hot prediction path.

A job is frozen (every nested spec too), so a function of the job alone can reuse its last result while it is
called with the *same* job object: one prediction asks for the job's sharding, fusions and per-stage layer kinds
dozens of times (once per stage in the cost and memory models), and a warm loop predicts the same job again.
The cache holds one entry per function and compares by identity (``is``), not equality, so it never hashes a job
(hashing a nested pydantic model costs more than most of these functions) and a job changed by ``model_copy`` is a
new object and misses. The slot is replaced in one assignment, so concurrent callers at worst recompute.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from trainsim.spec.job import Job

R = TypeVar("R")


def per_job(fn: Callable[[Job], R]) -> Callable[[Job], R]:
    """Cache ``fn(job)`` for the most recent ``job`` object (identity); ``fn`` must be pure and return a value
    its callers do not mutate (a frozen dataclass, a tuple)."""
    slot: list[tuple[object, R]] = []

    @wraps(fn)
    def cached(job: Job) -> R:
        last = slot[0] if slot else None
        if last is not None and last[0] is job:
            return last[1]
        value = fn(job)
        if slot:
            slot[0] = (job, value)
        else:
            slot.append((job, value))
        return value

    return cached
