"""Design-space search (``trainsim search``): which parallelization plan is fastest, cheapest, or needs the fewest
GPUs to finish by a deadline.

>>> from trainsim.search import SearchSpace, search
>>> space = SearchSpace(model="gpt3-175b", system="dgx-a100", num_gpus=1024,
...                     training={"global_batch_size": 1536, "train_tokens": 300e9})
>>> result = search(space, objective="cost")            # doctest: +SKIP
>>> result.best.plan(), result.best.training_days        # doctest: +SKIP

:class:`SearchSpace` defines the dimensions (fixed, listed or open); :func:`search` enumerates the valid candidates
(skips counted by reason), evaluates them with the analytic estimator on a backend (process pool or Ray), ranks them
by the objective, computes the (time, cost) Pareto front, and optionally refines the best with the event engine.
"""

from trainsim.search.backends import BACKENDS, Backend, LocalBackend, RayBackend, get_backend, register_backend
from trainsim.search.evaluate import Candidate, EvalContext
from trainsim.search.objectives import OBJECTIVES, pareto_front, rank
from trainsim.search.result import CANDIDATE_KEYS, SearchResult
from trainsim.search.runner import search
from trainsim.search.space import DIMENSIONS, OPEN, CandidateSpec, SearchSpace, enumerate_space, parse_values

__all__ = [
    "BACKENDS",
    "CANDIDATE_KEYS",
    "DIMENSIONS",
    "OBJECTIVES",
    "OPEN",
    "Backend",
    "Candidate",
    "CandidateSpec",
    "EvalContext",
    "LocalBackend",
    "RayBackend",
    "SearchResult",
    "SearchSpace",
    "enumerate_space",
    "get_backend",
    "pareto_front",
    "parse_values",
    "rank",
    "register_backend",
    "search",
]

from trainsim._callable_module import make_callable

make_callable(__name__, search)  # trainsim.search(space) runs the search
