"""Parallelization plan: tensor, pipeline (with virtual stages), context, expert and data parallelism."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from trainsim.schedule import SCHEDULE_NAMES
from trainsim.spec.base import Spec

if TYPE_CHECKING:
    Schedule = str
else:  # the registered schedule names (trainsim.schedule.SCHEDULES)
    Schedule = Literal[SCHEDULE_NAMES]
DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"


class Parallelism(Spec):
    """How a job is split over GPUs.

    ``dp`` may be left ``None`` and is then derived from the GPU count. ``rank_order`` lists the dimensions from the
    fastest-varying (adjacent global ranks) to the slowest, as Megatron's ``tp-cp-ep-dp-pp`` default: with it,
    tensor-parallel ranks share a node. ``first_stage_layers``/``last_stage_layers`` give an uneven split
    (Megatron's ``--decoder-first-pipeline-num-layers``/``--decoder-last-pipeline-num-layers``).
    """

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    vpp: int = Field(default=1, gt=0, description="virtual stages (model chunks) per pipeline rank")
    cp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    dp: int | None = Field(default=None, gt=0)
    sequence_parallel: bool = False
    schedule: Schedule | None = Field(default=None, description="None: interleaved when vpp > 1, else 1f1b")
    rank_order: str = DEFAULT_RANK_ORDER
    first_stage_layers: int | None = Field(default=None, ge=0)
    last_stage_layers: int | None = Field(default=None, ge=0)

    @field_validator("rank_order")
    @classmethod
    def _check_order(cls, value: str) -> str:
        parts = value.lower().split("-")
        if sorted(parts) != sorted(DIMENSIONS):
            raise ValueError(f"must be a permutation of {DEFAULT_RANK_ORDER} (got {value!r})")
        return "-".join(parts)

    @property
    def model_parallel_size(self) -> int:
        """GPUs holding one replica of the model: tp·pp·cp."""
        return self.tp * self.pp * self.cp
