"""Design-space plot: time against GPUs, cost or memory, coloured by a parallel dimension, Pareto front highlighted."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from trainsim.errors import TrainsimError
from trainsim.io.atomic import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from trainsim.search.evaluate import Candidate
    from trainsim.search.result import SearchResult

PLOT_X = ("gpus", "cost", "memory")
PLOT_COLOR = ("tp", "pp", "vpp", "cp", "ep", "dp", "micro_batch_size", "schedule", "recompute", "zero_stage",
              "sequence_parallel", "rank_order", "num_gpus")


def default_x(result: SearchResult) -> str:
    """GPUs when the search spans several GPU counts, else cost with a token budget, else memory."""
    if len({c.num_gpus for c in result.candidates}) > 1:
        return "gpus"
    return "memory"


def plot_search(result: SearchResult, path: str | Path | None = None, x: str | None = None,
                color: str = "tp") -> Figure:
    """Scatter of every estimated candidate (fitting ones filled; the others, when ranked with ``--all``, as grey
    crosses); the (time, cost) Pareto front circled in black and joined when ``x`` is cost. Returns the matplotlib
    Figure; writes it as PNG (atomically) when ``path`` is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = x or default_x(result)
    if x not in PLOT_X:
        raise TrainsimError("plot_x", f"unknown axis {x!r}", f"use one of {', '.join(PLOT_X)}")
    if color not in PLOT_COLOR:
        raise TrainsimError("plot_color", f"unknown dimension {color!r}", f"use one of {', '.join(PLOT_COLOR)}")
    tokens = result.train_tokens is not None
    if x == "cost" and not any(c.cost_usd is not None or c.cost_per_iteration_usd is not None
                               for c in result.candidates):
        raise TrainsimError("plot_x", "no costs to plot", "give --train-tokens or plot against gpus or memory")

    def xval(c: Candidate) -> float:
        if x == "gpus":
            return c.num_gpus
        if x == "memory":
            return c.peak_memory_bytes / 1e9
        return (c.cost_usd if tokens else c.cost_per_iteration_usd) or float("nan")

    def yval(c: Candidate) -> float:
        """Training days (with a token budget) or iteration seconds; NaN (not drawn) where there is none."""
        y = c.training_days if tokens else c.iteration_time_s
        return math.nan if y is None else y

    shown = [c for c in result.candidates if c.estimated]
    fitting = [c for c in shown if c.fits]
    unfit = [c for c in shown if not c.fits]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    values = sorted({getattr(c, color) for c in fitting}, key=lambda v: (str(type(v)), v))
    cmap = plt.get_cmap("viridis" if len(values) > 10 else "tab10")
    size, alpha = (14, 0.75) if len(shown) < 3000 else (4, 0.35)
    # slowest groups first, so that the fast frontier (what matters) is drawn on top
    groups = [(v, [c for c in fitting if getattr(c, color) == v]) for v in values]
    for k, (v, pts) in sorted(enumerate(groups), key=lambda kv: -min(yval(c) for c in kv[1][1])):
        col = cmap(k / max(1, len(values) - 1)) if len(values) > 10 else cmap(k % 10)
        ax.scatter([xval(c) for c in pts], [yval(c) for c in pts], s=size, alpha=alpha, color=col,
                   label=f"{color} {v}", linewidths=0)
    if unfit and result.include_unfit:
        ax.scatter([xval(c) for c in unfit], [yval(c) for c in unfit], s=12, marker="x", color="0.6",
                   label="does not fit", linewidths=0.8)
    front = result.pareto_candidates()
    if front:
        fx, fy = [xval(c) for c in front], [yval(c) for c in front]
        ax.scatter(fx, fy, s=60, facecolors="none", edgecolors="black", linewidths=1.2, label="Pareto (time, cost)")
        if x == "cost":
            ax.plot(fx, fy, color="black", linewidth=0.8)
    best = result.best
    if best is not None:
        ax.scatter([xval(best)], [yval(best)], s=160, marker="*", color="red", edgecolors="black", linewidths=0.6,
                   label=f"best ({result.objective}): {best.plan()}", zorder=5)
    if result.deadline_days is not None and tokens:
        ax.axhline(result.deadline_days, color="red", linestyle="--", linewidth=0.8, label="deadline")
    ys = [y for y in map(yval, shown) if not math.isnan(y)]
    if ys and max(ys) / max(min(ys), 1e-12) > 20:
        ax.set_yscale("log")
    xs = [xval(c) for c in shown]
    if x != "memory" and xs and max(xs) / max(min(xs), 1e-12) >= (4 if x == "gpus" else 20):
        ax.set_xscale("log", base=2 if x == "gpus" else 10)
    if x == "memory" and fitting:
        cap = result.stats.get("capacity_bytes")
        if cap:
            ax.axvline(cap / 1e9, color="grey", linestyle=":", linewidth=0.8, label="GPU memory")
    ax.set_xlabel({"gpus": "GPUs", "memory": "peak memory per GPU (GB)",
                   "cost": "training cost (USD)" if tokens else "cost per iteration (USD)"}[x])
    ax.set_ylabel("training time (days)" if tokens else "iteration time (s)")
    ax.set_title(f"design space: {len(shown):,} estimated of {len(result.candidates):,} candidates")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (not labels[i].startswith(f"{color} "), i))
    colored = {f"{color} {v}": k for k, v in enumerate(values)}
    order.sort(key=lambda i: (labels[i] not in colored, colored.get(labels[i], i)))
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    if len(labels) > 16:
        keep = [i for i, lab in enumerate(labels) if not lab.startswith(f"{color} ")][:8]
        handles = [handles[i] for i in keep]
        labels = [labels[i] for i in keep]
    ax.legend(handles, labels, fontsize=7, loc="best")
    fig.tight_layout()
    plt.close(fig)  # out of pyplot's registry; the Figure still saves and displays
    if path is not None:
        with atomic_path(Path(path)) as tmp:
            fig.savefig(tmp, format="png")
    return fig
