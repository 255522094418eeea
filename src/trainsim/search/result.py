"""The result of a search: every evaluated candidate, the ranking, the Pareto front, skips; JSON/CSV/Parquet/plot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainsim.errors import TrainsimError
from trainsim.estimate import BREAKDOWN_KEYS
from trainsim.io.atomic import atomic_path, write_text_atomic
from trainsim.search.evaluate import Candidate
from trainsim.search.objectives import meets_deadline
from trainsim.search.refine import Refinement
from trainsim.search.space import CandidateSpec

if TYPE_CHECKING:
    import pandas as pd

#: Keys of every candidate in the JSON output, in order: the plan (the fields of
#: :class:`~trainsim.search.space.CandidateSpec`, i.e. the search dimensions declared on the spec fields), then the
#: evaluation.
CANDIDATE_KEYS = (
    "rank", *CandidateSpec._fields, "num_nodes", "iteration_time_s", "mfu", "hfu", "tokens_per_s",
    "fits", "tight", "peak_memory_bytes", "training_days", "gpu_hours", "cost_usd", "meets_deadline", "pareto",
    "engine",
)


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass
class SearchResult:
    """Everything a search found.

    ``candidates`` holds every valid configuration in enumeration order (``Candidate.index``); ``ranking`` and
    ``pareto`` are positions in it. ``skipped`` counts invalid combinations by the field their error names
    (``skipped_examples`` has one message per field); ``equivalent`` counts combinations merged with an identical one.
    """

    objective: str
    candidates: list[Candidate]
    ranking: list[int]
    pareto: list[int]
    skipped: dict[str, int]
    skipped_examples: dict[str, str]
    equivalent: int
    warnings: dict[str, int]
    space: dict[str, Any]
    train_tokens: float | None = None
    deadline_days: float | None = None
    include_unfit: bool = False
    price_per_gpu_hour: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    refinement: Refinement | None = None

    # ---- access -----------------------------------------------------------------------------------------------
    @property
    def best(self) -> Candidate | None:
        """The best ranked candidate, if any."""
        return self.candidates[self.ranking[0]] if self.ranking else None

    def top(self, k: int | None = 10) -> list[Candidate]:
        """The ``k`` best ranked candidates (all with ``k`` None or 0)."""
        ranked = [self.candidates[i] for i in self.ranking]
        return ranked if not k else ranked[:k]

    def pareto_candidates(self) -> list[Candidate]:
        """The Pareto front, fastest first."""
        return [self.candidates[i] for i in self.pareto]

    def _ranks(self) -> dict[int, int]:
        return {i: r + 1 for r, i in enumerate(self.ranking)}

    # ---- records ----------------------------------------------------------------------------------------------
    def record(self, c: Candidate, rank: int | None = None, pareto: bool | None = None,
               breakdown: bool = True) -> dict[str, Any]:
        """One candidate as a JSON-ready dictionary (keys :data:`CANDIDATE_KEYS`, then ``breakdown_s``)."""
        if pareto is None:
            pareto = any(self.candidates[i] is c for i in self.pareto)
        d: dict[str, Any] = {
            "rank": rank, **c.spec.report(), "num_nodes": c.num_nodes,
            "iteration_time_s": c.iteration_time_s, "mfu": c.mfu, "hfu": c.hfu, "tokens_per_s": c.tokens_per_s,
            "fits": c.fits, "tight": c.tight, "peak_memory_bytes": c.peak_memory_bytes,
            "training_days": c.training_days,
            "gpu_hours": c.gpu_hours, "cost_usd": c.cost_usd,
            "meets_deadline": meets_deadline(c, self.deadline_days) if c.estimated else None,
            "pareto": pareto, "engine": c.engine,
        }
        if c.analytic_iteration_time_s is not None:
            d["analytic_iteration_time_s"] = c.analytic_iteration_time_s
        if breakdown:
            d["breakdown_s"] = c.breakdown_s
        return {k: _clean(v) for k, v in d.items()}

    def summary(self) -> dict[str, Any]:
        """Counts and speed of the search."""
        n = len(self.candidates)
        return {
            "objective": self.objective,
            "train_tokens": self.train_tokens,
            "deadline_days": self.deadline_days,
            "include_unfit": self.include_unfit,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "space": self.space,
            "combinations": n + sum(self.skipped.values()) + self.equivalent,
            "valid": n,
            "fitting": sum(1 for c in self.candidates if c.fits),
            "ranked": len(self.ranking),
            "equivalent_merged": self.equivalent,
            **self.stats,
        }

    def to_json_dict(self, top: int | None = 10) -> dict[str, Any]:
        """The ``--json`` output: ``{"candidates", "pareto", "skipped", ...}``; ``top`` None/0 lists every ranked."""
        ranks = self._ranks()
        pareto_set = set(self.pareto)
        ranked = self.ranking if not top else self.ranking[:top]
        out: dict[str, Any] = {
            "candidates": [self.record(self.candidates[i], ranks[i], i in pareto_set) for i in ranked],
            "pareto": [self.record(self.candidates[i], ranks.get(i), True) for i in self.pareto],
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_examples": dict(sorted(self.skipped_examples.items())),
            "warnings": self.warnings,
            "summary": self.summary(),
        }
        if self.refinement is not None:
            out["refinement"] = self.refinement.to_dict()
        return out

    # ---- tables and files ---------------------------------------------------------------------------------------
    def to_dataframe(self, ranked_only: bool = False) -> pd.DataFrame:
        """Every evaluated candidate (or only the ranked ones, in rank order) as a table; the breakdown becomes
        ``time_<category>_s`` columns."""
        import pandas as pd

        ranks = self._ranks()
        pareto_set = set(self.pareto)
        order = list(self.ranking) if ranked_only else list(range(len(self.candidates)))
        cs = [self.candidates[i] for i in order]
        attrs = [k for k in CANDIDATE_KEYS if k not in ("rank", "meets_deadline", "pareto")]
        data: dict[str, Any] = {"rank": pd.array([ranks.get(i) for i in order], dtype="Int64")}
        for k in attrs:
            data[k] = [getattr(c, k) for c in cs]
        data["meets_deadline"] = [meets_deadline(c, self.deadline_days) if c.estimated else None for c in cs]
        data["pareto"] = [i in pareto_set for i in order]
        data["analytic_iteration_time_s"] = [c.analytic_iteration_time_s for c in cs]
        for j, k in enumerate(BREAKDOWN_KEYS):
            data[f"time_{k}_s"] = [c.breakdown[j] if c.breakdown is not None else None for c in cs]
        df = pd.DataFrame(data)
        float_cols = ["iteration_time_s", "mfu", "hfu", "tokens_per_s", "training_days", "gpu_hours", "cost_usd",
                      "analytic_iteration_time_s", *(f"time_{k}_s" for k in BREAKDOWN_KEYS)]
        for col in float_cols:
            df[col] = df[col].astype("float64")
        return df[[*CANDIDATE_KEYS, "analytic_iteration_time_s", *(f"time_{k}_s" for k in BREAKDOWN_KEYS)]]

    def write(self, path: str | Path, top: int | None = 10) -> Path:
        """Write ``.json`` (the ``--json`` object), ``.csv`` or ``.parquet`` (every evaluated candidate)."""
        path = Path(path)
        suffix = path.suffix.lower()
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".json":
            import json

            write_text_atomic(path, json.dumps(self.to_json_dict(top), indent=2, allow_nan=False) + "\n")
        elif suffix == ".csv":
            with atomic_path(path) as tmp:
                self.to_dataframe().to_csv(tmp, index=False)
        elif suffix in (".parquet", ".pq"):
            with atomic_path(path) as tmp:
                self.to_dataframe().to_parquet(tmp, index=False)
        else:
            raise TrainsimError("output", f"unknown file type {path.name!r}", "use .json, .csv or .parquet")
        return path

    def plot(self, path: str | Path | None = None, x: str | None = None, color: str = "tp") -> Any:
        """The design-space plot as a matplotlib Figure, also written as PNG to ``path`` when given; see
        :func:`trainsim.search.plot.plot_search`."""
        from trainsim.search.plot import plot_search

        return plot_search(self, path, x=x, color=color)

    def to_frame(self, ranked_only: bool = False) -> pd.DataFrame:
        """Every evaluated candidate as a DataFrame (the same as :meth:`to_dataframe`)."""
        return self.to_dataframe(ranked_only=ranked_only)

    def _repr_html_(self) -> str:
        """Rich display in Jupyter: the ten best plans."""
        best = self.to_dataframe(ranked_only=True).head(10)
        return (f"<div><b>search: {len(self.candidates):,} candidates, objective {self.objective}</b>"
                f"{best.to_html(index=False, max_cols=20)}</div>")
