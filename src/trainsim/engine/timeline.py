"""The result of a simulation: when every task ran, on which unit, stream and replica class, in which step.

A :class:`Timeline` keeps the graph and ``[tasks, columns]`` matrices of start and end times; a column is one replica
class in one simulated step (``column = step · classes + class``). Replicas of one class are identical and are
expanded only on export (:meth:`Timeline.replicas_of`). Times are seconds from the start of the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from trainsim.graph.build import Graph, Kind

if TYPE_CHECKING:
    from trainsim.engine.stragglers import Heterogeneity, Scenario
    from trainsim.parallel.layout import Layout
    from trainsim.spec.job import Job

#: Streams (Chrome trace threads) of a unit, in display order.
STREAMS: tuple[str, ...] = ("compute", "tp/cp comm", "dp comm", "grad sync", "pp fwd send", "pp fwd recv",
                            "pp bwd send", "pp bwd recv", "ep dispatch/combine")
STREAM_ID = {name: i + 1 for i, name in enumerate(STREAMS)}

KIND_LABEL = {
    Kind.FWD: "forward", Kind.BWD: "backward", Kind.WGT: "weight-grad", Kind.SEND_F: "activation transfer",
    Kind.SEND_B: "gradient transfer", Kind.PARAM_AG: "param all-gather", Kind.GRAD_RS: "grad reduce",
    Kind.LN_AR: "layernorm-grad all-reduce", Kind.EMB_AR: "embedding-grad all-reduce",
    Kind.GRAD_WAIT: "wait for grad buckets", Kind.CLIP: "grad-norm all-reduce", Kind.OPT: "optimizer",
    Kind.ARRIVE: "arrive", Kind.START: "start",
}


@dataclass
class Timeline:
    """A simulated training step (or several), per unit and stream."""

    job: Job
    graph: Graph
    layout: Layout
    scenario: Scenario
    heterogeneity: Heterogeneity
    start: np.ndarray
    end: np.ndarray
    arrive: np.ndarray
    base: np.ndarray  # durations before runtime interactions
    overlap: np.ndarray  # overlap slowdown of compute tasks
    inblock: np.ndarray  # in-block collectives slowed by shared links
    steps: int  # steps requested (identical steps are simulated once)
    iterations: int  # fixed-point rounds
    residual: float  # largest duration change in the last round (seconds)
    contended_flows: int = 0
    overlapped_tasks: int = 0
    info: dict[str, object] = field(default_factory=dict)

    # ---- shape ------------------------------------------------------------------------------------------------
    @property
    def classes(self) -> int:
        """Replica classes."""
        return self.scenario.num_classes

    @property
    def sim_steps(self) -> int:
        """Distinct simulated steps (1 unless sequence lengths vary)."""
        return self.scenario.steps

    def column(self, step: int, cls: int) -> int:
        """Column of replica class ``cls`` in simulated step ``step``."""
        return (step % self.sim_steps) * self.classes + cls

    def replicas_of(self, cls: int) -> tuple[int, ...]:
        """Data-parallel replicas of a class."""
        return self.scenario.classes[cls]

    def class_of_replica(self) -> np.ndarray:
        """Class of every data-parallel replica."""
        out = np.empty(self.layout.dp, dtype=np.int64)
        for c, reps in enumerate(self.scenario.classes):
            out[list(reps)] = c
        return out

    @property
    def dur(self) -> np.ndarray:
        """Durations as simulated."""
        return self.end - self.start

    # ---- times ------------------------------------------------------------------------------------------------
    def step_end(self) -> np.ndarray:
        """End of every simulated step (the last optimizer step of any unit)."""
        opt = self.graph.ids(Kind.OPT)
        per_col = self.end[opt].max(axis=0)
        return per_col.reshape(self.sim_steps, self.classes).max(axis=1)

    def step_times(self) -> np.ndarray:
        """Duration of each requested step (identical steps repeated)."""
        ends = self.step_end()
        return np.array([ends[k % self.sim_steps] for k in range(self.steps)])

    def task_frame(self, columns: list[int] | None = None) -> pd.DataFrame:
        """All tasks with their times (long format: one row per task and column)."""
        g = self.graph
        cols = list(range(self.start.shape[1])) if columns is None else columns
        n = g.num_tasks
        frames = []
        for c in cols:
            frames.append(pd.DataFrame({
                "task": np.arange(n), "column": c, "step": c // self.classes, "cls": c % self.classes,
                "kind": [KIND_LABEL[Kind(k)] for k in g.kind], "stage": g.stage, "peer": g.peer,
                "microbatch": g.mb, "chunk": g.chunk, "virtual_stage": g.vstage, "bucket": g.bucket,
                "start_s": self.start[:, c], "end_s": self.end[:, c],
            }))
        return pd.concat(frames, ignore_index=True)
