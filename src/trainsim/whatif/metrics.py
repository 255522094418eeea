"""Slowdown metrics of the what-if analysis (the paper's equations 1-5 and section 5).

``T(x)`` is the mean simulated step time over the analysed steps. Ratios are ratios of means; per-step ratios
divide step by step.
"""

from __future__ import annotations

import math

import numpy as np

from trainsim.io.traces import BACKWARD_COMPUTE, FORWARD_COMPUTE
from trainsim.whatif.model import DependencyModel

#: Shares are undefined (``None``) when the original and the ideal differ by less than this relative amount.
SHARE_EPS = 1e-12


def ratio_of_means(t_num: np.ndarray, t_den: np.ndarray) -> float:
    """``mean(t_num) / mean(t_den)``: the slowdown of one step-time series over another."""
    return float(np.mean(t_num) / np.mean(t_den))


def share(t_original: float, t_selected: float, t_ideal: float) -> float | None:
    """Share of the slowdown explained by a selection: ``(T(orig) - T(orig, selection idealized)) / (T(orig) -
    T(ideal))``.

    ``None`` when there is no slowdown to explain.
    """
    gap = t_original - t_ideal
    if abs(gap) <= SHARE_EPS * max(abs(t_ideal), 1e-300):
        return None
    return float((t_original - t_selected) / gap)


def added_share(t_original: float, t_added: float, t_ideal: float) -> float | None:
    """The "add" variant of :func:`share`:
    ``(T(ideal, selection original) - T(ideal)) / (T(orig) - T(ideal))``."""
    gap = t_original - t_ideal
    if abs(gap) <= SHARE_EPS * max(abs(t_ideal), 1e-300):
        return None
    return float((t_added - t_ideal) / gap)


def worker_count(num_traced: int, percent: int = 3) -> int:
    """Number of workers in M_W: ``ceil(percent % of the traced ranks)``, at least one."""
    return max(1, math.ceil(num_traced * percent / 100))


def worst_workers(
    cells: list[tuple[int, int, int]], by_dp: dict[int, float], by_stage: dict[int, float], count: int
) -> list[tuple[int, int, int]]:
    """The ``count`` workers ``(rank, dp_rank, stage)`` with the highest ``min(S_dp, S_stage)``, ties to the
    lower rank."""
    scored = sorted(cells, key=lambda c: (-min(by_dp[c[1]], by_stage[c[2]]), c[0]))
    return scored[:count]


def _pairs(model: DependencyModel) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per stage: forward and backward op ids of the same (model chunk, micro-batch), aligned."""
    ops = model.ops
    out = []
    for stage in range(model.num_stages):
        sel = ops[ops["stage"] == stage]
        fwd = sel[sel["optype"] == FORWARD_COMPUTE]
        bwd = sel[sel["optype"] == BACKWARD_COMPUTE]
        bkey = {(int(mc), int(mb)): int(i) for mc, mb, i in zip(bwd["mc"], bwd["mb_id"], bwd.index, strict=True)}
        f_ids, b_ids = [], []
        for mc, mb, i in zip(fwd["mc"], fwd["mb_id"], fwd.index, strict=True):
            j = bkey.get((int(mc), int(mb)))
            if j is not None:
                f_ids.append(int(i))
                b_ids.append(j)
        if len(f_ids) >= 2:
            out.append((np.array(f_ids), np.array(b_ids)))
    return out


def fwd_bwd_correlation(model: DependencyModel, duration: np.ndarray) -> float | None:
    """Pearson correlation of forward and backward compute times of the same micro-batch.

    Each (step, rank)'s mean forward and mean backward time are removed first, so that only the variation
    between micro-batches of one rank remains. Long sequences slow both passes of their micro-batch: a
    correlation close to 1 together with a large :func:`forward_time_cv` is the signature of sequence-length
    imbalance. ``None`` when there are fewer than two micro-batches or no variation.
    """
    fs, bs = [], []
    for f_ids, b_ids in _pairs(model):
        f = duration[f_ids]
        b = duration[b_ids]
        fs.append((f - f.mean(axis=0)).ravel())
        bs.append((b - b.mean(axis=0)).ravel())
    if not fs:
        return None
    f_all, b_all = np.concatenate(fs), np.concatenate(bs)
    denom = math.sqrt(float(np.dot(f_all, f_all)) * float(np.dot(b_all, b_all)))
    if denom <= 0.0:
        return None
    return float(np.clip(np.dot(f_all, b_all) / denom, -1.0, 1.0))


def forward_time_cv(model: DependencyModel, duration: np.ndarray) -> float | None:
    """Within-rank variability of forward compute time.

    The coefficient of variation (population std / mean) of the forward times of one (step, rank), averaged
    over steps and ranks. ``None`` with fewer than two micro-batches.
    """
    cvs = []
    for f_ids, _ in _pairs(model):
        f = duration[f_ids]
        mean = f.mean(axis=0)
        ok = mean > 0
        cvs.append((f.std(axis=0)[ok] / mean[ok]).ravel())
    if not cvs:
        return None
    allcv = np.concatenate(cvs)
    return float(allcv.mean()) if len(allcv) else None
