"""Human-readable summary of a what-if result (rich tables for the terminal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from trainsim.whatif.result import WhatIfResult

#: Longest lists shown in the terminal (the JSON and the tables hold everything).
TOP_DP_RANKS = 8
TOP_STEPS = 5


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f} %"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "n/a" if x is None else format(x, fmt)


def render(result: WhatIfResult, console: Console) -> None:
    """Print the summary, the attribution tables and the verdict."""
    from rich.table import Table

    m = result.meta
    traced = len(result.per_rank)
    console.print(
        f"[bold]what-if straggler analysis[/bold] of {m.trial_name}: dp={m.dp_size} pp={m.pp_size} "
        f"tp={m.tp_size} dsp={m.dsp_size} vpp={m.vpp_size} (world {m.world_size}, {traced} traced ranks), "
        f"{len(result.steps)} steps"
    )

    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    summary.add_column(style="dim")
    summary.add_row("step time, actual", f"{result.step_time_actual_s:.4f} s", "mean measured")
    summary.add_row("step time, simulated", f"{result.step_time_simulated_s:.4f} s", "T(original), no launch delays")
    summary.add_row("step time, ideal", f"{result.step_time_ideal_s:.4f} s", "T(ideal), no stragglers")
    summary.add_row("slowdown S", f"{result.slowdown:.4f}", "T(original) / T(ideal)")
    summary.add_row("wasted GPU time", _pct(result.wasted_gpu_fraction), "1 - 1/S")
    summary.add_row("discrepancy", f"{result.discrepancy:.4f}", "T(actual) / T(original): unexplained launch delays")
    summary.add_row(
        "last-stage share M_S", _pct(result.last_stage_share), "slowdown removed by idealizing the last stage"
    )
    cells = ", ".join(f"(dp {d}, stage {s})" for d, s in result.worker_share_cells)
    summary.add_row("worker share M_W", _pct(result.worker_share), f"worst workers: {cells}")
    summary.add_row("fwd/bwd correlation", _num(result.fwd_bwd_correlation), "per micro-batch, rank means removed")
    summary.add_row("forward time CV", _num(result.forward_time_cv), "within a rank and step")
    console.print(summary)

    by_type = Table(title="slowdown by op type (S_t)", title_justify="left")
    by_type.add_column("op type")
    by_type.add_column("S_t", justify="right")
    for k, v in result.slowdown_by_optype.items():
        by_type.add_row(k, f"{v:.4f}")
    console.print(by_type)

    by_stage = Table(title="slowdown by stage", title_justify="left")
    by_stage.add_column("stage", justify="right")
    by_stage.add_column("S", justify="right")
    for k, v in result.slowdown_by_stage.items():
        by_stage.add_row(str(k), f"{v:.4f}")
    console.print(by_stage)

    dps = sorted(result.slowdown_by_dp_rank.items(), key=lambda kv: -kv[1])
    title = "slowdown by DP rank" + (f" (worst {TOP_DP_RANKS} of {len(dps)})" if len(dps) > TOP_DP_RANKS else "")
    by_dp = Table(title=title, title_justify="left")
    by_dp.add_column("dp rank", justify="right")
    by_dp.add_column("S", justify="right")
    for k, v in dps[:TOP_DP_RANKS]:
        by_dp.add_row(str(k), f"{v:.4f}")
    console.print(by_dp)

    if result.slowdown_by_ep_group:
        members: dict[int, list[int]] = {}
        session = result.session
        if session is not None and session.model.ep_groups is not None:
            for dp, g in zip(session.dp_ranks, session.model.ep_groups, strict=True):
                members.setdefault(int(g), []).append(int(dp))
        by_ep = Table(title="slowdown by expert-parallel group (DP ranks exchanging tokens)", title_justify="left")
        by_ep.add_column("group", justify="right")
        by_ep.add_column("DP ranks", justify="right")
        by_ep.add_column("S", justify="right")
        for g, v in sorted(result.slowdown_by_ep_group.items(), key=lambda kv: -kv[1])[:TOP_DP_RANKS]:
            ranks = members.get(int(g), [])
            shown = f"{min(ranks)}-{max(ranks)}" if ranks and max(ranks) - min(ranks) + 1 == len(ranks) else str(ranks)
            by_ep.add_row(str(g), shown, f"{v:.4f}")
        console.print(by_ep)

    worst = sorted(result.slowdown_by_step.items(), key=lambda kv: -kv[1])[:TOP_STEPS]
    by_step = Table(title=f"slowest steps (of {len(result.steps)})", title_justify="left")
    by_step.add_column("step", justify="right")
    by_step.add_column("S", justify="right")
    by_step.add_column("actual", justify="right")
    for k, v in worst:
        by_step.add_row(str(k), f"{v:.4f}", f"{result.per_step.loc[k, 'actual_s']:.4f} s")
    console.print(by_step)

    if result.launch_delay_by_optype is not None:
        launch = Table(title="launch delays by op type", title_justify="left")
        launch.add_column("op type")
        launch.add_column("ratio", justify="right")
        for k, v in result.launch_delay_by_optype.items():
            launch.add_row(k, f"{v:.4f}")
        console.print(launch)

    console.print(f"[bold]verdict: {result.verdict}[/bold] — {result.verdict_reason}")
