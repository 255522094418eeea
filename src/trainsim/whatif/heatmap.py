"""Worker-slowdown heatmap (the paper's SMon view): DP rank x pipeline stage.

Each cell is one traced worker coloured by ``min(S of its DP rank, S of its stage)``: a worker is only as
guilty as both its DP rank and its stage. A single dark cell is a slow machine; a dark row is a slow stage;
scattered cells that move from step to step point to data (sequence-length) imbalance. The workers counted in
M_W are outlined.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from trainsim.io.atomic import atomic_path

if TYPE_CHECKING:  # pragma: no cover
    from trainsim.whatif.result import WhatIfResult

#: Cells are annotated with their value up to this many cells.
ANNOTATE_MAX_CELLS = 400


def worker_matrix(result: WhatIfResult) -> tuple[np.ndarray, list[int], list[int]]:
    """``(matrix[stage, dp index], dp_ranks, stages)`` of worker slowdowns."""
    table = result.per_rank
    dps = sorted(int(d) for d in table["dp_rank"].unique())
    stages = sorted(int(s) for s in table["stage"].unique())
    mat = np.full((len(stages), len(dps)), np.nan)
    d_pos = {d: i for i, d in enumerate(dps)}
    s_pos = {s: i for i, s in enumerate(stages)}
    for dp, st, v in zip(table["dp_rank"], table["stage"], table["worker_slowdown"], strict=True):
        mat[s_pos[int(st)], d_pos[int(dp)]] = v
    return mat, dps, stages


def step_worker_matrix(result: WhatIfResult, step: int) -> np.ndarray:
    """``matrix[stage, dp index]`` of one step's worker slowdowns: ``min(S_dp, S_stage)`` of that step (the same
    rule as the mean heatmap, on the per-step attributions ``step_by_dp_rank`` and ``step_by_stage``)."""
    _, dps, stages = worker_matrix(result)
    by_dp = result.step_by_dp_rank.loc[step, dps].to_numpy(dtype=float)
    by_stage = result.step_by_stage.loc[step, stages].to_numpy(dtype=float)
    return np.minimum(by_stage[:, None], by_dp[None, :])


def plot_worker_heatmap(
    result: WhatIfResult, path: str | os.PathLike[str], vmin: float = 1.0, vmax: float = 1.5
) -> None:
    """Write the heatmap as PNG. Colours saturate at ``vmax``; the annotations show the exact values."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from mpl_toolkits.axes_grid1 import make_axes_locatable

    mat, dps, stages = worker_matrix(result)
    n_s, n_d = mat.shape
    width = min(max(6.0, 0.42 * n_d + 2.2), 40.0)
    height = max(2.8, 0.42 * n_s + 2.0)
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    cmap = matplotlib.colormaps["Reds"].with_extremes(bad="#dddddd")
    image = ax.imshow(
        np.ma.masked_invalid(mat), cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal", interpolation="nearest"
    )
    if n_s * n_d <= ANNOTATE_MAX_CELLS:
        size = 8 if n_d <= 16 else 6
        for i in range(n_s):
            for j in range(n_d):
                v = mat[i, j]
                if np.isfinite(v):
                    dark = (v - vmin) / max(vmax - vmin, 1e-12) > 0.6
                    ax.text(
                        j,
                        i,
                        f"{v:.2f}",
                        ha="center",
                        va="center",
                        fontsize=size,
                        color="white" if dark else "black",
                    )
    d_pos = {d: j for j, d in enumerate(dps)}
    s_pos = {s: i for i, s in enumerate(stages)}
    for dp, st in result.worker_share_cells:
        ax.add_patch(
            Rectangle((d_pos[dp] - 0.5, s_pos[st] - 0.5), 1, 1, fill=False, edgecolor="#1f4e99", linewidth=2.0)
        )
    step_x = max(1, int(np.ceil(n_d / 32)))
    ax.set_xticks(range(0, n_d, step_x), [str(d) for d in dps[::step_x]], fontsize=8)
    ax.set_yticks(range(n_s), [str(s) for s in stages], fontsize=8)
    ax.set_xlabel("DP rank")
    ax.set_ylabel("pipeline stage")
    ms, mw = _pct(result.last_stage_share), _pct(result.worker_share)
    ax.set_title(
        f"{result.meta.trial_name}: worker slowdown min(S_dp, S_stage)\n"
        f"S={result.slowdown:.3f}, M_S={ms}, M_W={mw} (outlined), verdict: {result.verdict}",
        fontsize=9,
    )
    divider = make_axes_locatable(ax)
    bar = fig.colorbar(image, cax=divider.append_axes("right", size=0.18, pad=0.12))
    bar.set_label("min(S_dp, S_stage)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "0%" if abs(x) < 0.005 else f"{x:.0%}"
