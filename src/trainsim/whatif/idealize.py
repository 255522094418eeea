"""Idealized operation times: what each operation would take without stragglers (the paper's section 3.4).

By default, compute-like operations (forward/backward compute, optimizer, gc) take the mean of their type and
communication operations the median of their type (a few slow transfers should not move the ideal), one value
per type across steps, micro-batches, stages and DP ranks. For communication-group members the value replaces
the transfer time; layernorm-grads-all-reduce is simulated as a local op but idealized with the median like
the other communication. The grouping and the statistics are configurable.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from trainsim.errors import TrainsimError
from trainsim.whatif.model import DependencyModel

Statistic = Literal["mean", "median", "trimmed-mean"]
Grouping = Literal["optype", "optype-stage", "optype-chunk"]
STATISTICS: tuple[str, ...] = ("mean", "median", "trimmed-mean")
GROUPINGS: tuple[str, ...] = ("optype", "optype-stage", "optype-chunk")


@dataclasses.dataclass(frozen=True)
class IdealizeConfig:
    """How ideal operation times are computed.

    ``group_by``: ``optype`` (one value per operation type, the paper's choice), ``optype-stage`` (per type
    and pipeline stage, for intentionally unbalanced pipelines) or ``optype-chunk`` (per type and global model
    chunk; communication ops carry no chunk and fall back to per type). ``compute_stat`` / ``comm_stat``:
    ``mean``, ``median`` or ``trimmed-mean`` (dropping ``trim_fraction`` of the values at each end).
    """

    group_by: Grouping = "optype"
    compute_stat: Statistic = "mean"
    comm_stat: Statistic = "median"
    trim_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.group_by not in GROUPINGS:
            raise TrainsimError("ideal.group_by", f"unknown grouping {self.group_by!r}", f"use one of {GROUPINGS}")
        for name in ("compute_stat", "comm_stat"):
            if getattr(self, name) not in STATISTICS:
                raise TrainsimError(
                    f"ideal.{name}", f"unknown statistic {getattr(self, name)!r}", f"use one of {STATISTICS}"
                )
        if not 0.0 <= self.trim_fraction < 0.5:
            raise TrainsimError(
                "ideal.trim_fraction",
                f"must be in [0, 0.5), got {self.trim_fraction}",
                "e.g. 0.1 drops the lowest and highest 10 %",
            )

    def to_dict(self) -> dict[str, object]:
        """The configuration as a plain mapping (reported in the result)."""
        return dataclasses.asdict(self)


def statistic(values: np.ndarray, stat: str, trim_fraction: float = 0.1) -> float:
    """Mean, median or trimmed mean of a flat array of seconds."""
    if stat == "mean":
        return float(np.mean(values))
    if stat == "median":
        return float(np.median(values))
    if stat == "trimmed-mean":
        v = np.sort(values, axis=None)
        cut = int(np.floor(len(v) * trim_fraction))
        return float(np.mean(v[cut : len(v) - cut]))
    raise TrainsimError("ideal", f"unknown statistic {stat!r}", f"use one of {STATISTICS}")


def group_keys(model: DependencyModel, group_by: str) -> list[tuple[object, ...]]:
    """Idealization group of each operation."""
    ops = model.ops
    optype = ops["optype"].tolist()
    if group_by == "optype":
        return [(t,) for t in optype]
    if group_by == "optype-stage":
        return list(zip(optype, ops["stage"].astype(int).tolist(), strict=True))
    return list(zip(optype, ops["gmc"].astype(int).tolist(), strict=True))


def ideal_work(model: DependencyModel, work: np.ndarray, config: IdealizeConfig | None = None) -> np.ndarray:
    """Ideal work times, shape ``(ops, steps, dp_ranks)``: every op replaced by its group's statistic."""
    cfg = config or IdealizeConfig()
    keys = group_keys(model, cfg.group_by)
    comm = model.ops["comm_family"].to_numpy()
    members: dict[tuple[object, ...], list[int]] = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    out = np.empty_like(work)
    for ids in members.values():
        idx = np.array(ids)
        stat = cfg.comm_stat if comm[idx[0]] else cfg.compute_stat
        out[idx] = statistic(work[idx], stat, cfg.trim_fraction)
    return out
