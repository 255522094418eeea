"""The result of a what-if analysis: JSON-ready summary plus per-step / per-stage / per-rank tables."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from trainsim.io.atomic import atomic_path, write_text_atomic
from trainsim.io.traces import TraceMeta

if TYPE_CHECKING:  # pragma: no cover
    from trainsim.whatif.session import WhatIf

#: Keys of :meth:`WhatIfResult.to_dict` (the CLI's ``--json`` object), in order.
JSON_KEYS: tuple[str, ...] = (
    "job",
    "steps",
    "step_time_actual_s",
    "step_time_simulated_s",
    "step_time_ideal_s",
    "slowdown",
    "discrepancy",
    "slowdown_by_optype",
    "slowdown_by_stage",
    "slowdown_by_dp_rank",
    "slowdown_by_step",
    "last_stage_share",
    "worker_share",
    "worker_share_cells",
    "fwd_bwd_correlation",
    "forward_time_cv",
    "wasted_gpu_fraction",
    "verdict",
    "verdict_reason",
    "launch_delay_by_optype",
    "launch_delay_by_stage",
    "launch_delay_by_dp_rank",
    "idealization",
)


def _f(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _keyed(d: dict[Any, float] | None) -> dict[str, float | None] | None:
    return None if d is None else {str(k): _f(v) for k, v in d.items()}


@dataclasses.dataclass(repr=False)
class WhatIfResult:
    """Outcome of :func:`trainsim.whatif.analyze_trace`.

    Scalars follow the paper: ``T(x)`` is the mean step time over the analysed steps; ``slowdown`` ``S =
    T(original) / T(ideal)``; ``discrepancy = T(actual) / T(original)`` (launch delays the dependency model
    does not explain); ``slowdown_by_*`` ``= T(ideal with that group at its original times) / T(ideal)``;
    ``last_stage_share`` (M_S) and ``worker_share`` (M_W) ``= (T(original) - T(original with the selection
    idealized)) / (T(original) - T(ideal))``. The DataFrames hold the same numbers per step, stage, DP rank
    and worker.
    """

    meta: TraceMeta
    steps: list[int]
    step_time_actual_s: float
    step_time_simulated_s: float
    step_time_ideal_s: float
    slowdown: float
    discrepancy: float
    slowdown_by_optype: dict[str, float]
    slowdown_by_stage: dict[int, float]
    slowdown_by_dp_rank: dict[int, float]
    slowdown_by_step: dict[int, float]
    last_stage_share: float | None
    last_stage_share_added: float | None  #: (T(ideal, last stage original) - T(ideal)) / (T(orig) - T(ideal))
    worker_share: float | None
    worker_share_added: float | None  #: the same "add" variant for the worst workers
    worker_share_cells: list[tuple[int, int]]
    fwd_bwd_correlation: float | None
    forward_time_cv: float | None
    wasted_gpu_fraction: float
    verdict: str
    verdict_reason: str
    launch_delay_by_optype: dict[str, float] | None
    launch_delay_by_stage: dict[int, float] | None
    launch_delay_by_dp_rank: dict[int, float] | None
    idealization: dict[str, Any]
    per_step: pd.DataFrame  #: index step: actual_s, simulated_s, ideal_s, slowdown, discrepancy
    per_stage: pd.DataFrame  #: index stage: slowdown
    per_dp_rank: pd.DataFrame  #: index dp_rank: slowdown
    per_rank: pd.DataFrame  #: index rank: dp_rank, stage, worker_slowdown, in_worker_share
    step_by_optype: pd.DataFrame  #: index step, one column per op type: per-step S_t
    step_by_stage: pd.DataFrame  #: index step, one column per stage
    step_by_dp_rank: pd.DataFrame  #: index step, one column per DP rank
    session: WhatIf | None = dataclasses.field(default=None, repr=False, compare=False)
    #: expert-parallel jobs: slowdown from restoring each expert group's original times into the ideal run
    slowdown_by_ep_group: dict[int, float] | None = None
    #: expert-parallel jobs: the (expert group, stage) cells idealized for ``worker_share``
    worker_share_ep_groups: list[tuple[int, int]] | None = None

    def __repr__(self) -> str:
        return (
            f"WhatIfResult(trial={self.meta.trial_name!r}, steps={len(self.steps)}, "
            f"slowdown={self.slowdown:.4f}, verdict={self.verdict!r})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object printed by ``trainsim whatif --json`` (stage, rank and step keys are strings)."""
        d: dict[str, Any] = {
            "job": self.meta.to_dict(),
            "steps": [int(s) for s in self.steps],
            "step_time_actual_s": _f(self.step_time_actual_s),
            "step_time_simulated_s": _f(self.step_time_simulated_s),
            "step_time_ideal_s": _f(self.step_time_ideal_s),
            "slowdown": _f(self.slowdown),
            "discrepancy": _f(self.discrepancy),
            "slowdown_by_optype": _keyed(self.slowdown_by_optype),
            "slowdown_by_stage": _keyed(self.slowdown_by_stage),
            "slowdown_by_dp_rank": _keyed(self.slowdown_by_dp_rank),
            "slowdown_by_step": _keyed(self.slowdown_by_step),
            "last_stage_share": _f(self.last_stage_share),
            "worker_share": _f(self.worker_share),
            "worker_share_cells": [[int(d), int(s)] for d, s in self.worker_share_cells],
            "fwd_bwd_correlation": _f(self.fwd_bwd_correlation),
            "forward_time_cv": _f(self.forward_time_cv),
            "wasted_gpu_fraction": _f(self.wasted_gpu_fraction),
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "launch_delay_by_optype": _keyed(self.launch_delay_by_optype),
            "launch_delay_by_stage": _keyed(self.launch_delay_by_stage),
            "launch_delay_by_dp_rank": _keyed(self.launch_delay_by_dp_rank),
            "idealization": dict(self.idealization),
        }
        out = {k: d[k] for k in JSON_KEYS}
        if self.slowdown_by_ep_group:
            out["slowdown_by_ep_group"] = _keyed(self.slowdown_by_ep_group)
            out["worker_share_ep_groups"] = [[int(g), int(s)] for g, s in self.worker_share_ep_groups or []]
        return out

    def summary(self) -> dict[str, Any]:
        """The headline numbers in one flat mapping: the row of :meth:`to_frame`."""
        return {"trial": self.meta.trial_name, "steps": len(self.steps),
                "step_time_actual_s": self.step_time_actual_s, "step_time_simulated_s": self.step_time_simulated_s,
                "step_time_ideal_s": self.step_time_ideal_s, "slowdown": self.slowdown,
                "discrepancy": self.discrepancy, "last_stage_share": self.last_stage_share,
                "worker_share": self.worker_share, "wasted_gpu_fraction": self.wasted_gpu_fraction,
                "verdict": self.verdict}

    def to_frame(self) -> pd.DataFrame:
        """A one-row DataFrame of :meth:`summary` (the per-step, per-stage, per-rank tables are the ``per_*``
        attributes)."""
        return pd.DataFrame([self.summary()])

    def _repr_html_(self) -> str:
        """Rich display in Jupyter: the summary and the verdict."""
        import html

        return (f"<div><b>what-if: {html.escape(self.meta.trial_name)}</b>"
                f"{self.to_frame().to_html(index=False)}<p>{html.escape(self.verdict_reason)}</p></div>")

    def plot_heatmap(self, path: str | os.PathLike[str] | None = None, vmin: float = 1.0,
                     vmax: float = 1.5) -> Any:
        """The worker-slowdown heatmap as a matplotlib Figure (written as PNG when ``path`` is given)."""
        from trainsim.whatif.heatmap import plot_worker_heatmap

        return plot_worker_heatmap(self, path, vmin=vmin, vmax=vmax)

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    def wasted_gpu_hours(self, steps: float | None = None) -> float:
        """GPU-hours lost to stragglers: world size × (T(original) − T(ideal)) per step, over the analysed steps
        (``steps`` None) or over ``steps`` steps at the mean rate (e.g. 1000)."""
        per_step_s = self.step_time_simulated_s - self.step_time_ideal_s
        n = len(self.steps) if steps is None else steps
        from trainsim.metrics import gpu_hours

        return gpu_hours(per_step_s * n, self.meta.world_size)

    def write_heatmap(self, path: str | os.PathLike[str], vmin: float = 1.0, vmax: float = 1.5) -> None:
        """PNG heatmap of worker slowdown, DP rank x stage (see :mod:`trainsim.whatif.heatmap`)."""
        from trainsim.whatif.heatmap import plot_worker_heatmap

        plot_worker_heatmap(self, path, vmin=vmin, vmax=vmax)

    def save(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write ``result.json``, the tables as CSV and ``heatmap.png`` into ``directory``; return paths."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        p = out / "result.json"
        write_text_atomic(p, self.to_json() + "\n")
        written.append(p)
        for name in (
            "per_step",
            "per_stage",
            "per_dp_rank",
            "per_rank",
            "step_by_optype",
            "step_by_stage",
            "step_by_dp_rank",
        ):
            p = out / f"{name}.csv"
            with atomic_path(p) as tmp:
                getattr(self, name).to_csv(tmp)
            written.append(p)
        p = out / "heatmap.png"
        self.write_heatmap(p)
        written.append(p)
        return written
