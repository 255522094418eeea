"""PNG plots of a cluster simulation (matplotlib): Gantt chart, GPU utilisation over time, JCT CDF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def utilisation_series(alloc: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Step function of GPUs held over time: (times, gpus held from each time on)."""
    if alloc.empty:
        return np.zeros(1), np.zeros(1)
    t = np.concatenate([alloc["t0_s"].to_numpy(), alloc["t1_s"].to_numpy()])
    d = np.concatenate([alloc["gpus"].to_numpy(), -alloc["gpus"].to_numpy()])
    order = np.lexsort((d, t))
    t, d = t[order], d[order]
    return t, np.cumsum(d)


def write_plots(out: Path, jobs: pd.DataFrame, alloc: pd.DataFrame, mets: dict[str, Any]) -> list[Path]:
    """Write ``gantt.png``, ``utilisation.png`` and ``jct_cdf.png`` into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from trainsim.io.atomic import atomic_path

    paths = []
    hours = 3600.0
    # Gantt: one line per job, coloured by GPU count
    fig, ax = plt.subplots(figsize=(10, max(3.0, min(12.0, 0.04 * len(jobs) + 2))))
    ids = {j: i for i, j in enumerate(jobs["job_id"])}
    if not alloc.empty:
        y = alloc["job_id"].map(ids).to_numpy()
        g = alloc["gpus"].to_numpy()
        colours = plt.get_cmap("viridis")(np.log2(g) / max(1.0, float(np.log2(g.max()))))
        ax.hlines(y, alloc["t0_s"] / hours, alloc["t1_s"] / hours, colors=colours,
                  linewidth=max(0.5, min(4.0, 300 / max(1, len(jobs)))))
    ax.set_xlabel("time (h)")
    ax.set_ylabel("job (trace order)")
    ax.set_title(f"allocations ({mets.get('policy')}, {mets.get('throughput')}); colour: log2 GPUs")
    paths.append(_save(fig, out / "gantt.png", atomic_path))
    plt.close(fig)
    # utilisation over time
    fig, ax = plt.subplots(figsize=(10, 3.5))
    t, held = utilisation_series(alloc)
    ax.step(t / hours, held / max(1, mets.get("num_gpus", 1)), where="post")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs allocated (fraction)")
    paths.append(_save(fig, out / "utilisation.png", atomic_path))
    plt.close(fig)
    # JCT CDF
    fig, ax = plt.subplots(figsize=(6, 4))
    jct = np.sort(jobs["jct_s"].dropna().to_numpy()) / hours
    if jct.size:
        ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    paths.append(_save(fig, out / "jct_cdf.png", atomic_path))
    plt.close(fig)
    return paths


def _save(fig: Any, path: Path, atomic_path: Any) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, metadata={"Software": None})
    return path
