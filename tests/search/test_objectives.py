import random

import pytest

from trainsim.errors import TrainsimError
from trainsim.search.evaluate import Candidate
from trainsim.search.objectives import pareto_front, rank, resolve_objective, time_cost
from trainsim.search.space import CandidateSpec


def cand(i, days=None, cost=None, gpus=8, fits=True, t=1.0, mem=1e9):
    spec = CandidateSpec(gpus, 1, 1, 1, 1, 1, gpus, 1, "1f1b", "none", 0, False, "tp-cp-ep-dp-pp")
    c = Candidate(i, spec, 1, fits, mem)
    c.iteration_time_s = t
    c.training_days = days
    c.cost_usd = cost
    c.cost_per_iteration_usd = t * gpus
    return c


def test_objective_defaults_aliases_and_requirements():
    assert resolve_objective(None, None, None) == "time"
    assert resolve_objective(None, 30, 1e12) == "cost"
    assert resolve_objective("iteration-time", None, None) == "time"
    assert resolve_objective("days", None, 1e12) == "training-time"
    assert resolve_objective("GPUS", 10, 1e12) == "gpus"
    for args, field in [(("cost", None, None), "train_tokens"), (("time", 30, None), "train_tokens"),
                        (("gpus", None, 1e12), "deadline_days"), (("speed", None, None), "objective"),
                        (("cost", -1, 1e12), "deadline_days")]:
        with pytest.raises(TrainsimError) as exc:
            resolve_objective(*args)
        assert exc.value.field == field


def test_rank_by_each_objective_with_deadline_and_fit():
    cs = [
        cand(0, days=10, cost=100, gpus=64, t=1.0),
        cand(1, days=20, cost=80, gpus=32, t=2.0),
        cand(2, days=40, cost=70, gpus=16, t=4.0),
        cand(3, days=5, cost=300, gpus=256, t=0.5, fits=False),
        cand(4, days=20, cost=80, gpus=32, t=2.0),  # tie with 1: enumeration order decides
    ]
    assert rank(cs, "time") == [0, 1, 4, 2]
    assert rank(cs, "time", include_unfit=True) == [3, 0, 1, 4, 2]
    assert rank(cs, "training-time") == [0, 1, 4, 2]
    assert rank(cs, "cost") == [2, 1, 4, 0]
    assert rank(cs, "cost", deadline_days=25) == [1, 4, 0]
    assert rank(cs, "gpus", deadline_days=25) == [1, 4, 0]
    assert rank(cs, "gpus", deadline_days=1) == []
    unestimated = cand(5, fits=False)
    unestimated.iteration_time_s = None
    assert 5 not in rank([*cs, unestimated], "time", include_unfit=True)


def dominated(p, points):
    return any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points)


def test_pareto_front_is_exactly_the_non_dominated_set():
    rng = random.Random(7)
    cs = [cand(i, days=rng.choice(range(1, 30)), cost=rng.choice(range(1, 30)), fits=rng.random() > 0.2)
          for i in range(300)]
    front = pareto_front(cs)
    pts = [time_cost(c) for c in cs if c.fits]
    expected = {i for i, c in enumerate(cs) if c.fits and not dominated(time_cost(c), pts)}
    assert set(front) == expected
    times = [time_cost(cs[i])[0] for i in front]
    assert times == sorted(times)
    assert set(pareto_front(cs, include_unfit=True)) == {
        i for i, c in enumerate(cs) if not dominated(time_cost(c), [time_cost(x) for x in cs])}


def test_pareto_without_token_budget_uses_iteration_time_and_cost():
    a, b = cand(0, t=1.0, gpus=64), cand(1, t=2.0, gpus=16)
    assert time_cost(a) == (1.0, 64.0) and pareto_front([a, b]) == [0, 1]
