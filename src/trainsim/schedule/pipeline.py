"""The pipeline-schedule base class: everything that is specific to one schedule lives in its subclass.

A :class:`PipelineSchedule` owns the per-stage action order (:meth:`~PipelineSchedule.orders`), where each model
chunk sits (:meth:`~PipelineSchedule.vstage`, :meth:`~PipelineSchedule.rank_of`: Megatron's looping placement or a
V shape), whether the backward is split into input- and weight-gradient actions, how point-to-point transfers are
issued (:meth:`~PipelineSchedule.p2p_mode`), the activations in flight per stage, the analytic closed form
(:meth:`~PipelineSchedule.pipeline_time`), the published bubble fraction and its own validity checks. The registry in
:mod:`trainsim.schedule` maps names to instances; nothing outside :mod:`trainsim.schedule` compares schedule names.

Conventions: ``p`` pipeline ranks, ``m`` micro-batches, ``v`` model chunks per rank; per-stage lists ``f``, ``b``,
``w`` are the times of one *chunk's* forward, full backward (input and weight gradient) and weight-gradient part;
``P`` the exposed time of one transfer between ranks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar, Literal

from trainsim.errors import TrainsimError
from trainsim.schedule.base import BACKWARD, FORWARD, StageOrder, check_sizes

if TYPE_CHECKING:
    import numpy as np
else:
    from trainsim._lazy_numpy import np

P2PMode = Literal["blocking", "blocking-steps", "overlap"]


class PipelineSchedule(ABC):
    """One pipeline schedule (subclass per schedule; instances are stateless)."""

    #: Registry name (the ``--schedule`` value).
    name: ClassVar[str]
    #: One line for ``--help`` and the docs.
    summary: ClassVar[str]
    #: Backward split into input-gradient ``B`` and weight-gradient ``W`` actions.
    split_backward: ClassVar[bool] = False
    #: V-shaped placement: chunk 1 of rank ``s`` is virtual stage ``2p − 1 − s`` (first and last layers on rank 0).
    v_shape: ClassVar[bool] = False
    #: Model chunks per rank the schedule needs (``None``: any ``vpp`` the schedule accepts).
    fixed_chunks: ClassVar[int | None] = None
    #: Whether ``vpp > 1`` is allowed (interleaving).
    interleaves: ClassVar[bool] = False
    #: Part of the open search domain (with vpp = 1, or with the fixed chunk count).
    searched: ClassVar[bool] = False

    # ---- order and placement ------------------------------------------------------------------------------------
    #: The order depends on the chunk times (cost-aware generators such as ZB-V's).
    cost_aware: ClassVar[bool] = False

    @abstractmethod
    def build_orders(self, p: int, m: int, v: int,
                     costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        """Per-stage orders (arguments already checked); ``costs``: mean chunk forward, input-gradient and
        weight-gradient times, used only by cost-aware schedules."""

    def orders(self, p: int, m: int, v: int = 1,
               costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        """Per-stage orders for ``p`` ranks, ``m`` micro-batches and ``v`` chunks per rank."""
        check_sizes(self.name, p, m, v, interleaved=self.interleaves or self.fixed_chunks is not None)
        self.check(p, m, v)
        if not self.cost_aware or costs is None:
            costs = None
        else:  # relative times matter; round so that near-equal costs share a cached order
            scale = max(costs) or 1.0
            costs = (round(costs[0] / scale, 3), round(costs[1] / scale, 3), round(costs[2] / scale, 3))
        return _cached_orders(self, p, m, v, costs)

    def __call__(self, p: int, m: int, v: int = 1,
                 costs: tuple[float, float, float] | None = None) -> tuple[StageOrder, ...]:
        return self.orders(p, m, v, costs)

    def vstage(self, p: int, stage: int | np.ndarray, chunk: int | np.ndarray) -> np.ndarray:
        """Virtual stage of ``chunk`` on ``stage`` (works element-wise on arrays)."""
        s = np.asarray(stage, dtype=np.int64)
        c = np.asarray(chunk, dtype=np.int64)
        if self.v_shape:
            return np.where(c % 2 == 0, c * p + s, c * p + (p - 1 - s))
        return c * p + s

    def rank_of(self, p: int, vstage: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stage, chunk) holding virtual stage ``vstage`` (element-wise)."""
        vs = np.asarray(vstage, dtype=np.int64)
        c, pos = vs // p, vs % p
        if self.v_shape:
            return np.where(c % 2 == 0, pos, p - 1 - pos), c
        return pos, c

    def head_stage(self, p: int, v: int) -> int:
        """Rank holding the last virtual stage (LM head and loss): the last rank, or rank 0 when a V ends there."""
        return 0 if self.v_shape and (v - 1) % 2 else p - 1

    def accepts_chunks(self, v: int) -> bool:
        """Whether ``v`` model chunks per rank suit this schedule."""
        return v == self.fixed_chunks if self.fixed_chunks is not None else (v == 1 or self.interleaves)

    def accepts_microbatches(self, p: int, m: int) -> bool:
        """Whether ``m`` micro-batches per pipeline suit this schedule on ``p`` ranks (see :meth:`check`)."""
        return True

    # ---- communication ------------------------------------------------------------------------------------------
    def p2p_mode(self, overlap_p2p_comm: bool) -> P2PMode:
        """How sends and receives are issued: blocking batched calls by default."""
        return "blocking"

    # ---- memory -------------------------------------------------------------------------------------------------
    def in_flight(self, stage: int, p: int, m: int, v: int) -> float:
        """Peak micro-batches of activations (in units of the stage's whole layers) held by ``stage``.

        Default: counted from the order (+1 chunk per forward, −1 per backward), which is exact for any order.
        """
        return _in_flight_from_order(self, stage, p, m, v)

    def logits_held(self, m: int) -> int:
        """Micro-batches whose logits the head stage holds at once."""
        return 1

    # ---- time ---------------------------------------------------------------------------------------------------
    def pipeline_time(self, f: list[float], b: list[float], w: list[float], P: float, m: int,
                      v: int) -> tuple[float, int]:
        """Closed-form makespan of the pipelined passes and the critical stage (1F1B family by default).

        ``T = (m·v − 1)·max_s(f_s + b_s + 2P) + Σ_s (f_s + b_s) + 2(p − 1)P``.
        """
        p = len(f)
        cycles = [fi + bi + 2 * P for fi, bi in zip(f, b, strict=True)]
        crit = max(range(p), key=lambda i: cycles[i])
        return (m * v - 1) * cycles[crit] + sum(f) + sum(b) + 2 * (p - 1) * P, crit

    def transfers_on_path(self, p: int, m: int, v: int) -> int:
        """Transfers on the critical path (each costs the exposed ``P``)."""
        return 2 * (m * v - 1) + 2 * (p - 1) if p > 1 else 0

    @abstractmethod
    def bubble_fraction(self, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float = 0.0) -> float:
        """Published bubble fraction on uniform stages without communication: ``f``, ``b``, ``w`` are the times of
        one chunk's forward, input-gradient and weight-gradient action (the actions of :func:`time_schedule`; for
        schedules that do not split the backward, ``b + w`` is the backward)."""

    # ---- checks -------------------------------------------------------------------------------------------------
    def check(self, p: int, m: int, v: int) -> None:
        """Schedule-specific checks of ``pp``, micro-batches and ``vpp`` (raise :class:`TrainsimError`)."""
        if self.fixed_chunks is not None and v != self.fixed_chunks:
            raise TrainsimError("parallelism.vpp",
                                f"the {self.name} schedule places {self.fixed_chunks} model chunks per rank "
                                f"(vpp = {v})", f"give --vpp {self.fixed_chunks} with --schedule {self.name}")
        if not self.interleaves and self.fixed_chunks is None and v != 1:
            raise TrainsimError("parallelism.schedule", f"vpp = {v} needs the interleaved schedule, not {self.name}",
                                "use --schedule interleaved or leave --schedule out")

    def __repr__(self) -> str:
        return f"<schedule {self.name}>"


@lru_cache(maxsize=512)
def _cached_orders(schedule: PipelineSchedule, p: int, m: int, v: int,
                   costs: tuple[float, float, float] | None) -> tuple[StageOrder, ...]:
    return schedule.build_orders(p, m, v, costs)


@lru_cache(maxsize=4096)
def _in_flight_from_order(schedule: PipelineSchedule, stage: int, p: int, m: int, v: int) -> float:
    o = schedule.orders(p, m, v)[stage]
    delta = np.where(o.kind == FORWARD, 1, np.where(o.kind == BACKWARD, -1, 0))
    return float(np.cumsum(delta).max()) / v if len(o) else 0.0


def uniform_bubble(work: float, bubble: float) -> float:
    """Bubble fraction from per-stage work and idle time."""
    return bubble / (work + bubble) if work + bubble > 0 else 0.0
