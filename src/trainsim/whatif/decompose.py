"""Align a trace on the dependency model and decompose measured durations (the paper's section 3.3).

Every operation of every (step, DP rank) is placed in dense arrays of shape ``(ops, steps, dp_ranks)``. Then:

* the **transfer time** of a communication op is its end minus the latest start among its group (taken across
  DP ranks for DP-synchronised groups); the rest of its measured duration was spent waiting for peers;
* the **launch delay** of any op is its start minus the latest end of its dependencies, or minus the step
  start for an op without dependencies (CPU-side work that the trace does not show).

Values at or below -10 ms are clipped to 0 with a warning (clock skew or a trace that disagrees with the
model); small negatives stay, so that re-simulating with the launch delays reproduces the trace.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError, warn
from trainsim.whatif.model import DependencyModel

#: Launch delays and transfer times at or below minus this many seconds are clipped to 0.
CLIP_BELOW_S = 1e-2
_SHOW = 4


@dataclasses.dataclass(frozen=True)
class TraceArrays:
    """A trace in dense form: ``start``/``duration``/``end`` have shape ``(ops, steps, dp_ranks)``.

    Times are seconds relative to the step start (the earliest operation of the step over all traced ranks).
    """

    steps: np.ndarray
    dp_ranks: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    ranks: np.ndarray  #: global rank of each (stage, dp index)
    actual_step_time: np.ndarray  #: per step: latest end - earliest start in the trace

    @property
    def end(self) -> np.ndarray:
        """End times, ``start + duration``."""
        return self.start + self.duration


@dataclasses.dataclass(frozen=True)
class Decomposition:
    """Launch delays and transfer times of every operation, shape ``(ops, steps, dp_ranks)``.

    ``work`` is what the simulator consumes: the transfer time of communication-group members and the measured
    duration of local operations.
    """

    launch_delay: np.ndarray
    transfer: np.ndarray
    work: np.ndarray
    clipped_delays: int
    clipped_transfers: int


def align(df: pd.DataFrame, model: DependencyModel) -> TraceArrays:
    """Place a validated trace on the model's operations; every (step, DP rank) must match its structure."""
    keys = model.ops[["stage", "optype", "seq_id"]].reset_index(names="_op")
    merged = df.merge(keys, how="left", on=["stage", "optype", "seq_id"], sort=False)
    extra = merged["_op"].isna().to_numpy()
    if extra.any():
        rows = merged.loc[extra].head(_SHOW)
        where = "; ".join(
            f"step {r.step}, dp_rank {r.dp_rank}: {r.optype} #{r.seq_id} on stage {r.stage}" for r in rows.itertuples()
        )
        raise TrainsimError(
            "trace",
            f"{int(extra.sum())} op(s) absent from the reference step (step "
            f"{model.reference_step}, dp_rank {model.reference_dp_rank}): {where}",
            "every step and DP rank must run the same operations; drop incomplete steps (--steps) or repair the trace",
        )
    op = merged["_op"].to_numpy(dtype=np.int64)
    steps, s_idx = np.unique(merged["step"].to_numpy(), return_inverse=True)
    dps, d_idx = np.unique(merged["dp_rank"].to_numpy(), return_inverse=True)
    n_ops, n_s, n_d = model.num_ops, len(steps), len(dps)
    flat = (op * n_s + s_idx) * n_d + d_idx
    counts = np.bincount(flat, minlength=n_ops * n_s * n_d).reshape(n_ops, n_s, n_d)
    if (counts == 0).any():
        o, s, d = np.nonzero(counts == 0)
        where = "; ".join(
            f"step {steps[s[i]]}, dp_rank {dps[d[i]]}: {model.describe(int(o[i]))}" for i in range(min(_SHOW, len(o)))
        )
        raise TrainsimError(
            "trace",
            f"{len(o)} op(s) of the reference step (step {model.reference_step}, dp_rank "
            f"{model.reference_dp_rank}) are missing elsewhere: {where}",
            "every step and DP rank must run the same operations; drop incomplete steps (--steps) or repair the trace",
        )
    start_ts = merged["start_ts"].to_numpy(dtype=np.float64)
    duration = merged["duration"].to_numpy(dtype=np.float64)
    step_min = np.full(n_s, np.inf)
    np.minimum.at(step_min, s_idx, start_ts)
    step_max = np.full(n_s, -np.inf)
    np.maximum.at(step_max, s_idx, start_ts + duration)
    start = np.empty(n_ops * n_s * n_d)
    dur = np.empty(n_ops * n_s * n_d)
    start[flat] = start_ts - step_min[s_idx]
    dur[flat] = duration
    start = start.reshape(n_ops, n_s, n_d)
    dur = dur.reshape(n_ops, n_s, n_d)

    ranks = np.full((model.num_stages, n_d), -1, dtype=np.int64)
    ranks[merged["stage"].to_numpy(), d_idx] = merged["rank"].to_numpy()

    for stage, order in enumerate(model.compute_order):
        if len(order) < 2:
            continue
        bad = np.diff(start[order], axis=0) < 0  # (len-1, S, D)
        if bad.any():
            k, s, d = (int(x[0]) for x in np.nonzero(bad))
            raise TrainsimError(
                "trace",
                f"step {steps[s]}, dp_rank {dps[d]}, stage {stage}: compute order differs "
                f"from the reference step ({model.describe(int(order[k + 1]))} starts before "
                f"{model.describe(int(order[k]))})",
                "all steps must follow the same pipeline schedule; drop the odd steps (--steps)",
            )
    return TraceArrays(
        steps=steps,
        dp_ranks=dps,
        start=start,
        duration=dur,
        ranks=ranks,
        actual_step_time=step_max - step_min,
    )


def _dep_end(end: np.ndarray, deps: np.ndarray) -> np.ndarray | None:
    if len(deps) == 0:
        return None
    if len(deps) == 1:
        return end[deps[0]]
    return end[deps].max(axis=0)


def decompose(model: DependencyModel, arrays: TraceArrays) -> Decomposition:
    """Compute launch delays and transfer times (see the module docstring)."""
    start, dur = arrays.start, arrays.duration
    end = start + dur
    delay = np.empty_like(start)
    for v, d in enumerate(model.deps):
        ref = _dep_end(end, d)
        delay[v] = start[v] - (0.0 if ref is None else ref)  # step start is 0 after alignment
    transfer = np.full_like(start, np.nan)
    for g, members in enumerate(model.groups):
        latest = start[members].max(axis=0)
        if model.group_dp_sync[g]:
            latest = latest.max(axis=-1, keepdims=True)
        transfer[members] = end[members] - latest
    bad_delay = delay <= -CLIP_BELOW_S
    n_delay = int(bad_delay.sum())
    if n_delay:
        o, s, d = np.nonzero(bad_delay)
        warn(
            "trace",
            f"{n_delay} launch delay(s) below -{CLIP_BELOW_S * 1e3:.0f} ms set to 0 (e.g. "
            f"{model.describe(int(o[0]))} at step {arrays.steps[s[0]]}, dp_rank {arrays.dp_ranks[d[0]]}: "
            f"{delay[o[0], s[0], d[0]] * 1e3:.1f} ms); clocks may be skewed",
        )
        delay[bad_delay] = 0.0
    bad_xfer = transfer <= -CLIP_BELOW_S
    n_xfer = int(bad_xfer.sum())
    if n_xfer:
        o, s, d = np.nonzero(bad_xfer)
        warn(
            "trace",
            f"{n_xfer} transfer time(s) below -{CLIP_BELOW_S * 1e3:.0f} ms set to 0 (e.g. "
            f"{model.describe(int(o[0]))} at step {arrays.steps[s[0]]}, dp_rank {arrays.dp_ranks[d[0]]})",
        )
        transfer[bad_xfer] = 0.0
    is_comm = model.ops["is_comm"].to_numpy()
    work = np.where(is_comm[:, None, None], transfer, dur)
    return Decomposition(
        launch_delay=delay, transfer=transfer, work=work, clipped_delays=n_delay, clipped_transfers=n_xfer
    )
