"""Common types of the pipeline schedules: actions, per-stage orders and argument checks.

A schedule is a pure function ``(p, m, v) -> tuple[StageOrder, ...]``: for every pipeline rank (stage) the order in
which it runs the forward (``F``), backward (``B``) and, for zero-bubble schedules, weight-gradient (``W``) work of each
micro-batch and model chunk. Schedules know nothing about costs; dependencies between stages are implied (the forward
of virtual stage ``k`` needs the forward of ``k − 1``, the backward of ``k`` needs the backward of ``k + 1``).

Virtual stages (Megatron's interleaving): rank ``s`` holds model chunks ``c = 0 … v−1``, chunk ``c`` of rank ``s`` is
virtual stage ``c·p + s``. Without interleaving ``v = 1`` and the chunk is always 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from trainsim.errors import TrainsimError

if TYPE_CHECKING:
    import numpy as np
else:
    from trainsim._lazy_numpy import np

FORWARD, BACKWARD, WEIGHT = 0, 1, 2
KIND_NAMES = ("F", "B", "W")


class Action(NamedTuple):
    """One unit of work on one stage: forward ``F``, backward ``B`` (input gradient, with the weight gradient unless
    the schedule splits it off) or weight gradient ``W`` of ``microbatch`` on local model ``chunk``."""

    kind: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


@dataclass(frozen=True, eq=False)
class StageOrder:
    """The execution order of one stage as parallel arrays (``kind`` codes 0/1/2 for F/B/W)."""

    kind: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.kind)
        if len(self.microbatch) != n or len(self.chunk) != n:
            raise ValueError("kind, microbatch and chunk must have the same length")

    def __len__(self) -> int:
        return len(self.kind)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StageOrder):
            return NotImplemented
        return (np.array_equal(self.kind, other.kind) and np.array_equal(self.microbatch, other.microbatch)
                and np.array_equal(self.chunk, other.chunk))

    __hash__ = None  # type: ignore[assignment]

    def actions(self) -> list[Action]:
        """The order as a list of :class:`Action`."""
        return [Action(KIND_NAMES[k], int(b), int(c))
                for k, b, c in zip(self.kind.tolist(), self.microbatch.tolist(), self.chunk.tolist(), strict=True)]

    def __str__(self) -> str:
        return " ".join(str(a) for a in self.actions())


def make_order(kind: np.ndarray | list[int], microbatch: np.ndarray | list[int],
               chunk: np.ndarray | list[int] | None = None) -> StageOrder:
    """Build a :class:`StageOrder` with compact dtypes."""
    k = np.asarray(kind, dtype=np.int8)
    b = np.asarray(microbatch, dtype=np.int32)
    c = np.zeros(len(k), dtype=np.int16) if chunk is None else np.asarray(chunk, dtype=np.int16)
    return StageOrder(k, b, c)


def from_actions(actions: list[Action] | list[tuple[str, int, int]]) -> StageOrder:
    """Build a :class:`StageOrder` from actions (``("F", 0, 0)`` tuples or :class:`Action`)."""
    codes = {"F": FORWARD, "B": BACKWARD, "W": WEIGHT}
    return make_order([codes[a[0]] for a in actions], [a[1] for a in actions], [a[2] for a in actions])


class ScheduleFn(Protocol):
    """A schedule: per-stage orders for ``p`` stages, ``m`` micro-batches and ``v`` model chunks per stage."""

    def __call__(self, p: int, m: int, v: int = 1) -> tuple[StageOrder, ...]: ...


def check_sizes(name: str, p: int, m: int, v: int, interleaved: bool = False) -> None:
    """Validate the arguments of a schedule (raises :class:`TrainsimError`)."""
    for field, value in (("pp", p), ("num_microbatches", m), ("vpp", v)):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise TrainsimError(f"schedule.{field}", f"must be a positive integer (got {value!r})",
                                "give p, m and v ≥ 1")
    if not interleaved and v != 1:
        raise TrainsimError("parallelism.vpp", f"the {name} schedule has no virtual stages (vpp = {v})",
                            "use the interleaved schedule for vpp > 1")
