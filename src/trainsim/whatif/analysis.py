"""The what-if analysis: slowdown, attribution by op type / stage / DP rank / step, M_S, M_W, signals,
verdict.

All attribution scenarios are simulated together in one vectorized pass over (scenario, step, DP rank): each
scenario restores the original times of one group into the ideal run (or, for the shares, idealizes one
selection in the original run).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from trainsim.errors import warn
from trainsim.io.traces import (
    BACKWARD_RECV,
    BACKWARD_SEND,
    FORWARD_COMPUTE,
    FORWARD_RECV,
    FORWARD_SEND,
    OPTYPES,
    TraceMeta,
)
from trainsim.whatif.idealize import IdealizeConfig
from trainsim.whatif.metrics import (
    added_share,
    forward_time_cv,
    fwd_bwd_correlation,
    share,
    worker_count,
    worst_workers,
)
from trainsim.whatif.model import DEFAULT_EPS
from trainsim.whatif.result import WhatIfResult
from trainsim.whatif.session import WhatIf
from trainsim.whatif.simulate import simulate
from trainsim.whatif.verdict import VerdictRule, decide

#: Re-simulation with launch delays must reproduce the measured step times to this relative tolerance (else warn).
REPLAY_RTOL = 1e-6
#: Launch delays are attributed when ``T(actual) / T(original)`` reaches this ratio (the reference's 1.03).
DEFAULT_LAUNCH_THRESHOLD = 1.03
#: Sends and receives are attributed together per direction.
PP_COMM_GROUP = {
    FORWARD_SEND: "forward-pp-comm",
    FORWARD_RECV: "forward-pp-comm",
    BACKWARD_SEND: "backward-pp-comm",
    BACKWARD_RECV: "backward-pp-comm",
}
FIRST_OP = "first-op"
_GROUP_ORDER = [t for t in OPTYPES if t not in PP_COMM_GROUP] + [
    "forward-pp-comm",
    "backward-pp-comm",
    FIRST_OP,
]


def attribution_groups(w: WhatIf, first_op: bool = False) -> list[str]:
    """Attribution label of every operation: its op type, with sends/receives merged per direction; with
    ``first_op`` the first operation of each stage's step (forward compute #0 on stage 0, forward-recv #0
    elsewhere) gets its own label, since its launch delay includes the data loading."""
    ops = w.model.ops
    optypes: list[str] = ops["optype"].tolist()
    labels = [PP_COMM_GROUP.get(t, t) for t in optypes]
    if first_op:
        for i, (t, q, s) in enumerate(zip(ops["optype"], ops["seq_id"], ops["stage"], strict=True)):
            if q == 0 and ((s == 0 and t == FORWARD_COMPUTE) or (s > 0 and t == FORWARD_RECV)):
                labels[i] = FIRST_OP
    return labels


def _group_masks(w: WhatIf, labels: list[str]) -> tuple[list[Any], list[Any], list[Any], np.ndarray]:
    """Masks (scenario, op, dp) selecting each label, each stage and each DP rank."""
    ops = w.model.ops
    n_ops, n_d = w.model.num_ops, len(w.dp_ranks)
    lab = np.array(labels, dtype=object)
    kinds = sorted(set(labels), key=_GROUP_ORDER.index)
    stages = list(range(w.model.num_stages))
    stage = ops["stage"].to_numpy()
    masks = np.zeros((len(kinds) + len(stages) + n_d, n_ops, n_d), dtype=bool)
    for k, g in enumerate(kinds):
        masks[k, lab == g] = True
    for k, s in enumerate(stages):
        masks[len(kinds) + k, stage == s] = True
    for k in range(n_d):
        masks[len(kinds) + len(stages) + k, :, k] = True
    return kinds, stages, [int(d) for d in w.dp_ranks], masks


def _ep_group_slowdowns(w: WhatIf, dps: list[int], mean_ideal: float) -> tuple[dict[int, float], dict[int, list[int]]]:
    """Slowdown from restoring the original times of each expert group (all its DP ranks, all stages) into the
    ideal run, and the DP ranks of each group; empty without expert parallelism."""
    labels = w.model.ep_groups
    if labels is None or len(np.unique(labels)) == len(labels):
        return {}, {}
    groups = [int(g) for g in np.unique(labels)]
    members = {g: [dps[i] for i in np.flatnonzero(labels == g)] for g in groups}
    masks = np.zeros((len(groups), w.model.num_ops, len(dps)), dtype=bool)
    for k, g in enumerate(groups):
        masks[k][:, labels == g] = True
    t = simulate(w.model, w.ideal, w.original, masks).step_time
    return {g: float(t[k].mean() / mean_ideal) for k, g in enumerate(groups)}, members


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0-2, 5``."""
    out: list[str] = []
    vals = sorted(values)
    start = prev = vals[0]
    for v in [*vals[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def _sorted_desc(d: dict[Any, float]) -> dict[Any, float]:
    return dict(sorted(d.items(), key=lambda kv: -kv[1]))


def analyze(
    w: WhatIf,
    *,
    launch_threshold: float = DEFAULT_LAUNCH_THRESHOLD,
    worker_percent: int = 3,
    rule: VerdictRule | None = None,
) -> WhatIfResult:
    """Run the full what-if analysis on a prepared trace."""
    model = w.model
    steps = w.steps
    t_act = w.step_times("actual")
    replay = w.step_times("replay")
    replay_err = float(np.max(np.abs(replay - t_act) / t_act))
    if replay_err > REPLAY_RTOL:
        warn(
            "trace",
            f"re-simulating with the launch delays differs from the trace by up to {replay_err:.2%} of a step "
            f"({w.decomposition.clipped_delays} launch delays and {w.decomposition.clipped_transfers} transfer "
            "times were clipped): the dependency model does not fully explain this trace",
        )
    t_orig = w.step_times("original")
    t_ideal = w.step_times("ideal")
    mean_orig, mean_ideal = float(t_orig.mean()), float(t_ideal.mean())
    slowdown = mean_orig / mean_ideal
    discrepancy = float(t_act.mean()) / mean_orig
    stage_of = model.ops["stage"].to_numpy()
    last = model.num_stages - 1

    # --- attribution (restore each group's original times into the ideal run) + M_S in one batch
    labels = attribution_groups(w)
    kinds, stages, dps, masks = _group_masks(w, labels)
    keep_last_ideal = np.broadcast_to((stage_of != last)[:, None], masks.shape[1:])[None]  # M_S "remove"
    batch = simulate(model, w.ideal, w.original, np.concatenate([masks, keep_last_ideal])).step_time
    t_groups, t_ms_rem = batch[:-1], batch[-1]
    ratios = t_groups.mean(axis=1) / mean_ideal
    per_step = t_groups / t_ideal[None, :]
    n_k, n_s = len(kinds), len(stages)
    by_optype = _sorted_desc({g: float(ratios[i]) for i, g in enumerate(kinds)})
    by_stage = {s: float(ratios[n_k + i]) for i, s in enumerate(stages)}
    by_dp = {d: float(ratios[n_k + n_s + i]) for i, d in enumerate(dps)}
    steps_idx = pd.Index(steps, name="step")
    step_by_optype = pd.DataFrame(per_step[:n_k].T, index=steps_idx, columns=kinds)
    step_by_stage = pd.DataFrame(per_step[n_k : n_k + n_s].T, index=steps_idx, columns=pd.Index(stages, name="stage"))
    step_by_dp = pd.DataFrame(per_step[n_k + n_s :].T, index=steps_idx, columns=pd.Index(dps, name="dp_rank"))
    t_last_added = float(t_groups[n_k + last].mean())
    last_share = share(mean_orig, float(t_ms_rem.mean()), mean_ideal)
    last_share_added = added_share(mean_orig, t_last_added, mean_ideal)

    # --- M_W: the worst ceil(3 %) workers by min(S of their DP rank, S of their stage); with expert parallelism
    # the unit is an expert group on a stage (its members run in lock step, so idealizing one member alone
    # cannot remove the slowdown)
    ranks = w.arrays.ranks
    cells = [(int(ranks[s, d]), int(dp), s) for s in stages for d, dp in enumerate(dps)]
    dp_index = {dp: d for d, dp in enumerate(dps)}
    by_ep, ep_members = _ep_group_slowdowns(w, dps, mean_ideal)
    if by_ep:
        group_cells = [(min(int(ranks[s, dp_index[dp]]) for dp in ep_members[g]), g, s)
                       for s in stages for g in ep_members]
        by_group = {g: by_ep[g] for g in ep_members}
        n_workers = worker_count(len(group_cells), worker_percent)
        worst_groups = worst_workers(group_cells, by_group, by_stage, n_workers)
        worst = [(int(ranks[s, dp_index[dp]]), dp, s) for _, g, s in worst_groups for dp in ep_members[g]]
    else:
        worst_groups = []
        n_workers = worker_count(len(cells), worker_percent)
        worst = worst_workers(cells, by_dp, by_stage, n_workers)
    sel = np.zeros((model.num_ops, len(dps)), dtype=bool)
    for _, dp, s in worst:
        sel[stage_of == s, dp_index[dp]] = True
    t_mw = simulate(model, w.ideal, w.original, np.stack([~sel, sel])).step_time
    worker_share = share(mean_orig, float(t_mw[0].mean()), mean_ideal)
    worker_share_added = added_share(mean_orig, float(t_mw[1].mean()), mean_ideal)
    worst_set = {(dp, s) for _, dp, s in worst}
    per_rank = (
        pd.DataFrame(
            [(r, dp, s, min(by_dp[dp], by_stage[s]), (dp, s) in worst_set) for r, dp, s in cells],
            columns=["rank", "dp_rank", "stage", "worker_slowdown", "in_worker_share"],
        )
        .set_index("rank")
        .sort_index()
    )

    # --- launch delays (only when the trace is notably slower than the model explains)
    launch: dict[str, dict[Any, float] | None] = {"optype": None, "stage": None, "dp_rank": None}
    if discrepancy >= launch_threshold:
        l_kinds, l_stages, l_dps, l_masks = _group_masks(w, attribution_groups(w, first_op=True))
        t_l = simulate(model, w.original, w.actual, l_masks).step_time
        l_ratio = t_l.mean(axis=1) / mean_orig
        nk, ns = len(l_kinds), len(l_stages)
        launch["optype"] = _sorted_desc({g: float(l_ratio[i]) for i, g in enumerate(l_kinds)})
        launch["stage"] = {s: float(l_ratio[nk + i]) for i, s in enumerate(l_stages)}
        launch["dp_rank"] = {d: float(l_ratio[nk + ns + i]) for i, d in enumerate(l_dps)}

    # --- signals and verdict
    corr = fwd_bwd_correlation(model, w.arrays.duration)
    cv = forward_time_cv(model, w.arrays.duration)
    verdict, reason = decide(slowdown, worker_share, last_share, cv, corr, rule)
    if verdict == "worker" and worst_groups:
        named = "; ".join(f"expert group {g} (DP ranks {_ranges(ep_members[g])}) on stage {s}"
                          for _, g, s in worst_groups)
        reason = f"{reason}: {named} — its members exchange tokens in every MoE layer, so one slow GPU slows them all"

    per_step_table = pd.DataFrame(
        {
            "actual_s": t_act,
            "simulated_s": t_orig,
            "ideal_s": t_ideal,
            "slowdown": t_orig / t_ideal,
            "discrepancy": t_act / t_orig,
        },
        index=steps_idx,
    )
    return WhatIfResult(
        meta=w.meta,
        steps=[int(s) for s in steps],
        step_time_actual_s=float(t_act.mean()),
        step_time_simulated_s=mean_orig,
        step_time_ideal_s=mean_ideal,
        slowdown=slowdown,
        discrepancy=discrepancy,
        slowdown_by_optype=by_optype,
        slowdown_by_stage=by_stage,
        slowdown_by_dp_rank=by_dp,
        slowdown_by_step={int(s): float(v) for s, v in zip(steps, t_orig / t_ideal, strict=True)},
        last_stage_share=last_share,
        last_stage_share_added=last_share_added,
        worker_share=worker_share,
        worker_share_added=worker_share_added,
        worker_share_cells=[(dp, s) for _, dp, s in worst],
        slowdown_by_ep_group=by_ep or None,
        worker_share_ep_groups=[(g, s) for _, g, s in worst_groups] or None,
        fwd_bwd_correlation=corr,
        forward_time_cv=cv,
        wasted_gpu_fraction=1.0 - 1.0 / slowdown,
        verdict=verdict,
        verdict_reason=reason,
        launch_delay_by_optype=launch["optype"],
        launch_delay_by_stage=launch["stage"],
        launch_delay_by_dp_rank=launch["dp_rank"],
        idealization=w.ideal_config.to_dict(),
        per_step=per_step_table,
        per_stage=pd.DataFrame({"slowdown": by_stage}).rename_axis("stage"),
        per_dp_rank=pd.DataFrame({"slowdown": by_dp}).rename_axis("dp_rank"),
        per_rank=per_rank,
        step_by_optype=step_by_optype,
        step_by_stage=step_by_stage,
        step_by_dp_rank=step_by_dp,
        session=w,
    )


def analyze_trace(
    trace: pd.DataFrame | str | os.PathLike[str],
    meta: TraceMeta | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    steps: Iterable[int] | None = None,
    ideal: IdealizeConfig | None = None,
    eps: float = DEFAULT_EPS,
    launch_threshold: float = DEFAULT_LAUNCH_THRESHOLD,
    worker_percent: int = 3,
    rule: VerdictRule | None = None,
) -> WhatIfResult:
    """What-if straggler analysis of a training trace (the Python twin of ``trainsim whatif``).

    ``trace``: parquet path (released or rich schema) or DataFrame; ``meta``: path, mapping or TraceMeta
    (found beside the trace when omitted); ``steps``: analyse only these steps; ``ideal``: idealization
    grouping and statistics; ``eps``: clock-skew tolerance (s) for send/receive no-ops; ``launch_threshold``:
    attribute launch delays when ``T(actual)/T(original)`` reaches it; ``worker_percent``: share of workers in
    M_W; ``rule``: thresholds of the verdict. Raises :class:`~trainsim.errors.TrainsimError` on invalid input.
    """
    w = WhatIf(trace, meta, steps=steps, ideal=ideal, eps=eps)
    return analyze(w, launch_threshold=launch_threshold, worker_percent=worker_percent, rule=rule)
