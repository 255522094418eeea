"""A trace prepared for what-if simulation, and custom what-if experiments on it.

:class:`WhatIf` loads and validates a trace, builds the dependency model, decomposes the measured durations
and computes the ideal operation times once; then any number of what-if scenarios can be simulated cheaply::

    from trainsim.whatif import WhatIf, pp_comm_free, stage_like_others

    w = WhatIf("trace-ST.parquet")                   # meta-ST.yaml is found beside the trace
    w.simulate(pp_comm_free()).speedup               # all pipeline communication free
    w.simulate(stage_like_others(3)).speedup         # stage 3 at the mean of the other stages
    w.idealize(lambda t: t.dp_rank == 0).speedup     # DP rank 0 without stragglers

A custom transform receives the op table (:meth:`WhatIf.op_table`: one row per operation, step and DP rank)
and returns it with new ``duration`` and/or ``launch_delay`` values. ``duration`` is the time an operation
occupies once it can run: the compute time of a computation, the transfer time (excluding waiting for peers)
of a communication.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd

from trainsim.errors import TrainsimError
from trainsim.io.traces import P2P_OPTYPES, TraceMeta, load_trace
from trainsim.whatif.decompose import Decomposition, TraceArrays, align, decompose
from trainsim.whatif.idealize import IdealizeConfig, ideal_work
from trainsim.whatif.model import DEFAULT_EPS, STREAMS, DependencyModel, build_dependency_model
from trainsim.whatif.simulate import Inputs, simulate

Which = Literal["actual", "original", "ideal"]
Transform = Callable[[pd.DataFrame], pd.DataFrame | None]
Selector = Callable[[pd.DataFrame], Any]

#: Gap between consecutive steps laid out on one timeline, as a fraction of the previous step's time.
TIMELINE_GAP = 0.1


@dataclasses.dataclass(frozen=True)
class CustomResult:
    """Outcome of a custom what-if: simulated step times and comparisons with the original and the ideal."""

    step_time: pd.Series  #: simulated seconds per step (index: step)
    original_s: float  #: T(original): mean simulated step time of the trace without launch delays
    ideal_s: float  #: T(ideal)

    @property
    def step_time_s(self) -> float:
        """Mean simulated step time of the scenario (seconds)."""
        return float(self.step_time.mean())

    @property
    def speedup(self) -> float:
        """T(original) / T(scenario): above 1 when the scenario is faster than the original."""
        return self.original_s / self.step_time_s

    @property
    def slowdown(self) -> float:
        """T(scenario) / T(ideal)."""
        return self.step_time_s / self.ideal_s


def parse_steps(text: str) -> list[int]:
    """Parse a step selection such as ``"12,20-23"`` into ``[12, 20, 21, 22, 23]``."""
    steps: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else (part, part)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                steps.update(range(a, b + 1))
            else:
                steps.add(int(part))
        except ValueError:
            raise TrainsimError("steps", f"cannot parse {part!r}", "write steps like '12,20-23'") from None
    if not steps:
        raise TrainsimError("steps", "empty selection", "write steps like '12,20-23'")
    return sorted(steps)


class WhatIf:
    """A validated trace with its dependency model, decomposition and ideal operation times.

    Parameters: ``trace`` (parquet path of either schema, or a DataFrame), ``meta`` (path, mapping or
    :class:`~trainsim.io.traces.TraceMeta`; found beside the trace when omitted), ``steps`` (analyse only
    these steps), ``ideal`` (how ideal times are computed), ``eps`` (clock-skew tolerance, seconds, when
    classifying pipeline sends/receives as no-ops).
    """

    def __init__(
        self,
        trace: pd.DataFrame | str | os.PathLike[str],
        meta: TraceMeta | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        steps: Iterable[int] | None = None,
        ideal: IdealizeConfig | None = None,
        eps: float = DEFAULT_EPS,
    ) -> None:
        df, m = load_trace(trace, meta)
        if steps is not None:
            wanted = sorted({int(s) for s in steps})
            present = np.unique(df["step"].to_numpy())
            df = df[df["step"].isin(wanted)].reset_index(drop=True)
            if len(df) == 0:
                raise TrainsimError(
                    "steps",
                    f"none of {wanted[:8]} is in the trace",
                    f"choose among the traced steps {present[:12].tolist()}",
                )
        if not eps >= 0:
            raise TrainsimError("eps", f"must be >= 0, got {eps}", "use e.g. 5e-5 (0.05 ms)")
        ref_step = int(df["step"].min())
        ref_dp = int(df.loc[df["step"] == ref_step, "dp_rank"].min())
        ref = df[(df["step"] == ref_step) & (df["dp_rank"] == ref_dp)]
        self.meta: TraceMeta = m
        self.ideal_config: IdealizeConfig = ideal or IdealizeConfig()
        self.model: DependencyModel = build_dependency_model(
            ref,
            pp_size=m.pp_size,
            use_dp=m.dp_size * m.dsp_size > 1,
            eps=eps,
            reference_step=ref_step,
            reference_dp_rank=ref_dp,
        )
        self.arrays: TraceArrays = align(df, self.model)
        if m.ep_groups:  # expert-parallel coupling of the traced DP ranks
            labels = np.asarray(m.ep_groups)[self.arrays.dp_ranks]
            self.model = dataclasses.replace(self.model, ep_groups=labels)
        self.decomposition: Decomposition = decompose(self.model, self.arrays)
        self.actual = Inputs(self.decomposition.work, self.decomposition.launch_delay)
        self.original = Inputs(self.decomposition.work)
        self.ideal = Inputs(ideal_work(self.model, self.decomposition.work, self.ideal_config))
        self._times: dict[str, np.ndarray] = {"actual": self.arrays.actual_step_time}

    # ---- basic facts ---------------------------------------------------------------------------------------
    @property
    def steps(self) -> np.ndarray:
        """The analysed steps, ascending."""
        return self.arrays.steps

    @property
    def dp_ranks(self) -> np.ndarray:
        """The traced DP ranks, ascending."""
        return self.arrays.dp_ranks

    def inputs(self, which: Which) -> Inputs:
        """Simulator inputs of the actual run (with launch delays), the original (without) or the ideal."""
        if which not in ("actual", "original", "ideal"):
            raise TrainsimError("which", f"unknown run {which!r}", "use 'actual', 'original' or 'ideal'")
        return {"actual": self.actual, "original": self.original, "ideal": self.ideal}[which]

    def step_times(self, which: Which | Literal["replay"]) -> np.ndarray:
        """Per-step times: ``actual`` (measured), ``replay`` (simulated with launch delays; reproduces the
        trace), ``original`` (simulated without launch delays) or ``ideal``."""
        if which not in self._times:
            inputs = self.actual if which == "replay" else self.inputs(which)  # type: ignore[arg-type]
            self._times[which] = simulate(self.model, inputs).step_time[0]
        return self._times[which]

    # ---- custom what-if ------------------------------------------------------------------------------------
    def op_table(self, which: Which = "original") -> pd.DataFrame:
        """One row per operation, step and DP rank of a run, with the columns a custom what-if may change.

        Columns: ``step, dp_rank, stage, rank, optype, seq_id, mc, gmc, mb_id, is_comm`` (identification),
        ``duration`` (seconds the op occupies once it can run: compute time, or transfer time of a
        communication), ``launch_delay`` (seconds between its dependencies' end and its start; 0 except in the
        ``actual`` run) and ``measured_duration`` (as traced, including waiting for peers).
        """
        x = self.inputs(which)
        n_ops, n_s, n_d = x.work.shape
        op = np.repeat(np.arange(n_ops), n_s * n_d)
        s_idx = np.tile(np.repeat(np.arange(n_s), n_d), n_ops)
        d_idx = np.tile(np.arange(n_d), n_ops * n_s)
        ops = self.model.ops
        stage = ops["stage"].to_numpy()[op]
        table = pd.DataFrame(
            {
                "step": self.steps[s_idx],
                "dp_rank": self.dp_ranks[d_idx],
                "stage": stage,
                "rank": self.arrays.ranks[stage, d_idx],
                "optype": ops["optype"].to_numpy()[op],
                "seq_id": ops["seq_id"].to_numpy()[op],
                "mc": ops["mc"].to_numpy()[op],
                "gmc": ops["gmc"].to_numpy()[op],
                "mb_id": ops["mb_id"].to_numpy()[op],
                "is_comm": ops["is_comm"].to_numpy()[op],
                "duration": x.work.ravel().copy(),
                "launch_delay": (x.delay.ravel().copy() if x.delay is not None else np.zeros(op.size)),
                "measured_duration": self.arrays.duration.ravel().copy(),
            }
        )
        return table

    def _from_table(self, table: pd.DataFrame, n: int) -> Inputs:
        if not isinstance(table, pd.DataFrame):
            raise TrainsimError(
                "transform",
                f"returned {type(table).__name__}, expected the op table",
                "return the (modified) DataFrame, or None after modifying it in place",
            )
        for c in ("duration", "launch_delay"):
            if c not in table.columns:
                raise TrainsimError("transform", f"the op table lost its {c!r} column", f"keep {c!r}")
        idx = table.index.to_numpy()
        if len(idx) != n or not np.array_equal(np.sort(idx), np.arange(n)):
            raise TrainsimError(
                "transform",
                f"the op table must keep its {n} rows and their index",
                "change values in place; do not drop, add or re-index rows",
            )
        shape = self.original.work.shape
        out = {}
        for c in ("duration", "launch_delay"):
            vals = np.empty(n)
            vals[idx] = pd.to_numeric(table[c], errors="coerce").to_numpy(dtype=np.float64)
            if not np.isfinite(vals).all():
                bad = np.flatnonzero(~np.isfinite(vals))[:5]
                raise TrainsimError(f"transform.{c}", f"non-finite values at rows {bad.tolist()}", "set finite seconds")
            out[c] = vals.reshape(shape)
        if (out["duration"] < 0).any():
            bad = np.flatnonzero(out["duration"].ravel() < 0)[:5]
            raise TrainsimError(
                "transform.duration", f"negative durations at rows {bad.tolist()}", "durations must be >= 0"
            )
        delay = out["launch_delay"] if np.any(out["launch_delay"]) else None
        return Inputs(out["duration"], delay)

    def _result(self, step_time: np.ndarray) -> CustomResult:
        return CustomResult(
            step_time=pd.Series(step_time, index=pd.Index(self.steps, name="step"), name="step_time"),
            original_s=float(self.step_times("original").mean()),
            ideal_s=float(self.step_times("ideal").mean()),
        )

    def simulate(self, transform: Transform | None = None, *, base: Which = "original") -> CustomResult:
        """Simulate a custom what-if: ``transform`` edits the op table (:meth:`op_table`) of ``base``."""
        table = self.op_table(base)
        n = len(table)
        if transform is not None:
            out = transform(table)
            table = table if out is None else out
        inputs = self._from_table(table, n)
        return self._result(simulate(self.model, inputs).step_time[0])

    def _mask(self, select: Selector) -> np.ndarray:
        table = self.op_table("original")
        sel = select(table)
        arr = np.asarray(sel.to_numpy() if isinstance(sel, pd.Series) else sel)
        if arr.shape != (len(table),) or arr.dtype != bool:
            raise TrainsimError(
                "select",
                f"must return one boolean per op-table row ({len(table)}), got {arr.dtype} of shape {arr.shape}",
                "return e.g. table.stage == 3",
            )
        return arr.reshape(self.original.work.shape)

    def _masked(self, base: Inputs, alt: Inputs, mask: np.ndarray) -> CustomResult:
        work = np.where(mask, alt.work, base.work)
        return self._result(simulate(self.model, Inputs(work)).step_time[0])

    def idealize(self, select: Selector) -> CustomResult:
        """The original run with the selected operations at their ideal times ("remove" these stragglers)."""
        return self._masked(self.original, self.ideal, self._mask(select))

    def restore(self, select: Selector) -> CustomResult:
        """The ideal run with the selected operations at their original times ("add" these stragglers)."""
        return self._masked(self.ideal, self.original, self._mask(select))

    # ---- timelines -----------------------------------------------------------------------------------------
    def timeline_events(self, which: Which = "actual", steps: Iterable[int] | None = None) -> pd.DataFrame:
        """Timeline slices of a run, laid out step after step.

        Columns: ``pid`` (global rank), ``tid`` (stream), ``name`` (op type), ``ts_s``, ``dur_s`` and the args
        ``step, dp_rank, stage, seq_id, mb_id, mc, launch_delay_s, transfer_s`` (NaN for local ops).
        """
        if which == "actual":
            start, dur = self.arrays.start, self.arrays.duration
            times = self.step_times("actual")
        else:
            sim = simulate(self.model, self.inputs(which), record=True)
            assert sim.start is not None and sim.end is not None
            start, dur = sim.start[:, 0], sim.end[:, 0] - sim.start[:, 0]
            times = sim.step_time[0]
        keep = np.arange(len(self.steps))
        if steps is not None:
            wanted = set(int(s) for s in steps)
            keep = np.flatnonzero(np.isin(self.steps, sorted(wanted)))
            if len(keep) == 0:
                raise TrainsimError(
                    "timeline.steps",
                    f"none of {sorted(wanted)[:8]} is analysed",
                    f"choose among {self.steps[:12].tolist()}",
                )
        offsets = np.zeros(len(self.steps))
        acc = 0.0
        for k in keep:
            offsets[k] = acc
            acc += float(times[k]) * (1.0 + TIMELINE_GAP)
        n_ops, _, n_d = start.shape
        sub_start = start[:, keep] + offsets[keep][None, :, None]
        sub_dur = (start[:, keep] + dur[:, keep] + offsets[keep][None, :, None]) - sub_start
        n_k = len(keep)
        op = np.repeat(np.arange(n_ops), n_k * n_d)
        s_idx = np.tile(np.repeat(keep, n_d), n_ops)
        d_idx = np.tile(np.arange(n_d), n_ops * n_k)
        ops = self.model.ops
        stage = ops["stage"].to_numpy()[op]
        stream_id = {s: i for i, s in enumerate(STREAMS)}
        events = pd.DataFrame(
            {
                "pid": self.arrays.ranks[stage, d_idx],
                "tid": ops["stream"].map(stream_id).to_numpy()[op],
                "name": ops["optype"].to_numpy()[op],
                "ts_s": sub_start.ravel(),
                "dur_s": np.maximum(sub_dur.ravel(), 0.0),
                "step": self.steps[s_idx],
                "dp_rank": self.dp_ranks[d_idx],
                "stage": stage,
                "seq_id": ops["seq_id"].to_numpy()[op],
                "mb_id": ops["mb_id"].to_numpy()[op],
                "mc": ops["mc"].to_numpy()[op],
            }
        )
        x = self.inputs(which)
        events["launch_delay_s"] = x.delay[:, keep].ravel() if x.delay is not None else 0.0
        is_comm = ops["is_comm"].to_numpy()[op]
        events["transfer_s"] = np.where(is_comm, x.work[:, keep].ravel(), np.nan)
        return events.sort_values(["pid", "tid", "ts_s"], kind="stable").reset_index(drop=True)

    def write_timeline(
        self, path: str | os.PathLike[str], which: Which = "actual", steps: Iterable[int] | None = None
    ) -> None:
        """Write a Chrome/Perfetto JSON timeline (one process per traced GPU, one thread per stream)."""
        from trainsim.io.chrome import write_chrome_trace

        events = self.timeline_events(which, steps)
        ranks = self.arrays.ranks
        names, sort = {}, {}
        for stage in range(ranks.shape[0]):
            for d, dp in enumerate(self.dp_ranks):
                r = int(ranks[stage, d])
                names[r] = f"rank {r} (dp {int(dp)}, stage {stage})"
                sort[r] = d * ranks.shape[0] + stage
        threads = {i: s for i, s in enumerate(STREAMS)}
        write_chrome_trace(
            events,
            path,
            process_names=names,
            thread_names=threads,
            process_sort_index=sort,
            metadata={"trainsim.run": which, "trainsim.trial": self.meta.trial_name},
        )


def pp_comm_free() -> Transform:
    """Custom what-if: all pipeline (send/receive) communication takes no time."""

    def transform(table: pd.DataFrame) -> pd.DataFrame:
        table.loc[table["optype"].isin(P2P_OPTYPES), "duration"] = 0.0
        return table

    return transform


def stage_like_others(stage: int) -> Transform:
    """Custom what-if: every op of ``stage`` takes the mean time of the same op type on the other stages.

    An op type that only this stage runs keeps its time.
    """

    def transform(table: pd.DataFrame) -> pd.DataFrame:
        if not (table["stage"] == stage).any():
            raise TrainsimError(
                "stage",
                f"stage {stage} is not in the trace",
                f"choose among {sorted(table['stage'].unique().tolist())}",
            )
        others = table[table["stage"] != stage].groupby("optype")["duration"].mean()
        sel = table["stage"] == stage
        mapped = table.loc[sel, "optype"].map(others)
        table.loc[sel, "duration"] = mapped.fillna(table.loc[sel, "duration"]).to_numpy()
        return table

    return transform
