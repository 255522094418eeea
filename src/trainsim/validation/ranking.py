"""What plan search needs from a cost model: the right *order* of plans, not only small errors.

Within every group of measured runs of the same model (same source and architecture), runs are compared by their
cost for the same work: GPU-seconds per token (iteration time × GPUs / tokens per iteration), measured and
predicted. :func:`spearman` is the rank correlation of the two (1: the model orders the runs exactly as measured);
:func:`top1_regret` is how much worse the run the model predicts to be best really was than the measured best
(0: the model picks the measured best).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """Spearman rank correlation (NaN for fewer than two runs or constant values)."""
    if len(measured) < 2:
        return math.nan
    a, b = _ranks(measured), _ranks(predicted)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    va = math.sqrt(sum((x - ma) ** 2 for x in a))
    vb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return cov / (va * vb) if va and vb else math.nan


def top1_regret(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """Measured cost of the predicted-best run over the measured best, minus one (costs: lower is better)."""
    if not measured:
        return math.nan
    pick = min(range(len(predicted)), key=lambda i: predicted[i])
    return measured[pick] / min(measured) - 1.0


@dataclass(frozen=True)
class GroupRanking:
    """Ranking quality within one group of runs of the same model."""

    source: str
    model: str
    runs: int
    spearman: float
    regret: float


def rank_groups(rows: Sequence[tuple[str, str, float, float]]) -> list[GroupRanking]:
    """``rows`` of (source, model key, measured cost, predicted cost) → one :class:`GroupRanking` per group with at
    least two runs."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for source, model, m, p in rows:
        groups.setdefault((source, model), []).append((m, p))
    out = []
    for (source, model), pairs in groups.items():
        if len(pairs) < 2:
            continue
        meas, pred = [m for m, _ in pairs], [p for _, p in pairs]
        out.append(GroupRanking(source, model, len(pairs), spearman(meas, pred), top1_regret(meas, pred)))
    return out
