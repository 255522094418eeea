"""A cost model that makes every pipeline stage uniform and communication free (pure schedule timing)."""


from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from trainsim.cost.calibration import Calibration
from trainsim.cost.comm import Placement
from trainsim.workload.ops import CommOp, ComputeOp


@dataclass
class UniformCostModel:
    """Per transformer layer: forward ``f`` (the QKV GEMM), backward ``b`` (its data gradient) and weight gradient
    ``w`` (its weight gradient); every other op, every collective and the optimizer cost nothing."""

    f: float = 1e-3
    b: float = 1e-3
    w: float = 1e-3
    calibration: Calibration = field(default_factory=lambda: Calibration(overlap_slowdown=0.0))

    def compute(self, op: ComputeOp) -> float:
        return {"qkv": self.f, "qkv_dgrad": self.b, "qkv_wgrad": self.w}.get(op.name, 0.0)

    def host(self, op: ComputeOp) -> float:
        return 0.0  # no host wait: the schedule's closed forms hold

    def collective(self, op: CommOp, place: Placement) -> float:
        return 0.0

    def is_measured(self, op: ComputeOp | CommOp) -> bool:
        return False

    def optimizer_step(self, params: float) -> float:
        return 0.0


@pytest.fixture
def uniform_costs():
    """Factory of :class:`UniformCostModel` (keyword arguments: ``f``, ``b``, ``w`` seconds per layer)."""
    return UniformCostModel
