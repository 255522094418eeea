"""Training budgets and compute-optimal model sizing (``trainsim plan``).

>>> from trainsim.plan import plan
>>> result = plan("dgx-a100", 3360, days=30)     # doctest: +SKIP
>>> result.to_json_dict()["optimal"]["params"]   # doctest: +SKIP

:func:`plan` gives the naive Chinchilla point (100 % utilization) and the realistic one (the largest model shape whose
Chinchilla token count trains within the budget with its best parallelization plan); :mod:`trainsim.plan.budget`
converts GPUs × days or dollars into FLOPs.
"""

from trainsim.plan.budget import (
    CHINCHILLA_PARAMS_COEF,
    CHINCHILLA_TOKENS_COEF,
    TOKENS_PER_PARAM,
    Budget,
    chinchilla_point,
    chinchilla_tokens,
    make_budget,
)
from trainsim.plan.planner import PLAN_DIMENSIONS, PlanResult, ShapeResult, best_plan, plan
from trainsim.plan.shapes import Shape, shape_grid

__all__ = [
    "CHINCHILLA_PARAMS_COEF",
    "CHINCHILLA_TOKENS_COEF",
    "PLAN_DIMENSIONS",
    "TOKENS_PER_PARAM",
    "Budget",
    "PlanResult",
    "Shape",
    "ShapeResult",
    "best_plan",
    "chinchilla_point",
    "chinchilla_tokens",
    "make_budget",
    "plan",
    "shape_grid",
]

from trainsim._callable_module import make_callable

make_callable(__name__, plan)  # trainsim.plan(...) runs the planner
