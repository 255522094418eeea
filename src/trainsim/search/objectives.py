"""Objectives, constraints, ranking and the (time, cost) Pareto front.

Objectives (``--objective``):

- ``time``: iteration time (alias ``iteration-time``);
- ``training-time``: days to train on ``--train-tokens`` (alias ``days``; the same order as ``time`` at a fixed
  global batch, but reported in days);
- ``cost``: dollars for the whole run (GPU-hours × price);
- ``gpus``: fewest GPUs that finish within ``--deadline-days`` (ties: cheaper, then faster).

``--deadline-days`` constrains every objective (a plan slower than the deadline is not ranked); with a deadline and
no objective the default is ``cost``, else ``time``. Ties are broken by the other metrics, then by enumeration order,
so rankings are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trainsim.errors import TrainsimError
from trainsim.search.evaluate import Candidate

OBJECTIVES = ("time", "training-time", "cost", "gpus")
ALIASES = {"iteration-time": "time", "iteration_time": "time", "days": "training-time",
           "training_time": "training-time", "num-gpus": "gpus", "num_gpus": "gpus"}

_INF = float("inf")


def resolve_objective(objective: str | None, deadline_days: float | None, train_tokens: float | None) -> str:
    """Canonical objective name, checked against what it needs."""
    if deadline_days is not None and deadline_days <= 0:
        raise TrainsimError("deadline_days", f"must be positive (got {deadline_days})", "give days, e.g. 30")
    if objective is None:
        objective = "cost" if deadline_days is not None else "time"
    name = ALIASES.get(objective.lower(), objective.lower())
    if name not in OBJECTIVES:
        raise TrainsimError("objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}")
    if (name != "time" or deadline_days is not None) and not train_tokens:
        what = f"the {name} objective" if name != "time" else "a deadline"
        raise TrainsimError("train_tokens", f"{what} needs the number of training tokens",
                            "give --train-tokens, e.g. 300e9")
    if name == "gpus" and deadline_days is None:
        raise TrainsimError("deadline_days", "the gpus objective needs a deadline",
                            "give --deadline-days (the fewest GPUs that finish in time)")
    return name


def _f(x: float | None) -> float:
    return _INF if x is None else x


def sort_key(objective: str) -> Callable[[Candidate], tuple[float, ...]]:
    """Key ordering candidates from best to worst for ``objective``."""
    if objective == "time":
        return lambda c: (_f(c.iteration_time_s), c.num_gpus, c.peak_memory_bytes, c.index)
    if objective == "training-time":
        return lambda c: (_f(c.training_days), _f(c.cost_usd), c.peak_memory_bytes, c.index)
    if objective == "cost":
        return lambda c: (_f(c.cost_usd), _f(c.training_days), c.peak_memory_bytes, c.index)
    if objective == "gpus":
        return lambda c: (c.num_gpus, _f(c.cost_usd), _f(c.training_days), c.index)
    raise TrainsimError("objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}")


def meets_deadline(c: Candidate, deadline_days: float | None) -> bool:
    """Whether a candidate trains within the deadline (always true without one)."""
    if deadline_days is None:
        return True
    return c.training_days is not None and c.training_days <= deadline_days


def eligible(c: Candidate, include_unfit: bool, deadline_days: float | None) -> bool:
    """Whether a candidate takes part in the ranking."""
    return c.estimated and (c.fits or include_unfit) and meets_deadline(c, deadline_days)


def rank(candidates: Sequence[Candidate], objective: str, include_unfit: bool = False,
         deadline_days: float | None = None) -> list[int]:
    """Positions (in ``candidates``) of the ranked candidates, best first."""
    key = sort_key(objective)
    pos = [i for i, c in enumerate(candidates) if eligible(c, include_unfit, deadline_days)]
    # plans that fit only tightly (within 10 % of capacity) rank after every plan with headroom
    pos.sort(key=lambda i: (candidates[i].fits and candidates[i].tight, key(candidates[i])))
    return pos


def time_cost(c: Candidate) -> tuple[float, float]:
    """The two axes of the Pareto front: (training days, $) with a token budget, else per iteration."""
    if c.training_days is not None and c.cost_usd is not None:
        return c.training_days, c.cost_usd
    return _f(c.iteration_time_s), _f(c.cost_per_iteration_usd)


def pareto_front(candidates: Sequence[Candidate], include_unfit: bool = False) -> list[int]:
    """Positions of the candidates not dominated in (time, cost), fastest first.

    A candidate is dominated when another is no slower and no more expensive, and better in one; candidates with
    equal (time, cost) are all kept.
    """
    pos = [i for i, c in enumerate(candidates) if c.estimated and (c.fits or include_unfit)]
    pos.sort(key=lambda i: (*time_cost(candidates[i]), candidates[i].index))
    front: list[int] = []
    best_cost = _INF
    last: tuple[float, float] | None = None
    for i in pos:
        t, cost = time_cost(candidates[i])
        if cost < best_cost:
            front.append(i)
            best_cost = cost
            last = (t, cost)
        elif last is not None and (t, cost) == last:
            front.append(i)
    return front
