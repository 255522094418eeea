"""Readable (rich) rendering of a search result: the ranking, why the best wins, the Pareto front, what was skipped."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from trainsim.search.evaluate import Candidate
from trainsim.units import fmt_seconds

if TYPE_CHECKING:
    from trainsim.search.result import SearchResult

_OBJECTIVE_TEXT = {"time": "iteration time", "training-time": "training time", "cost": "training cost",
                   "gpus": "fewest GPUs"}


def _money(x: float | None) -> str:
    if x is None:
        return "–"
    if x >= 1e9:
        return f"${x / 1e9:,.2f}B"
    if x >= 1e6:
        return f"${x / 1e6:,.2f}M"
    if x >= 1e3:
        return f"${x / 1e3:,.0f}k"
    return f"${x:,.2f}"


def _time(s: float | None) -> str:
    return "–" if s is None else fmt_seconds(s)


def explain(c: Candidate) -> str:
    """Where the iteration time of a candidate goes, largest shares first."""
    b = c.breakdown_s
    if not b or not c.iteration_time_s:
        return ""
    t = c.iteration_time_s
    parts = sorted(((v / t, k) for k, v in b.items() if v > 0), reverse=True)
    return ", ".join(f"{k.replace('_', ' ')} {share:.0%}" for share, k in parts[:4])


_DIMS = (("GPUs", "num_gpus"), ("tp", "tp"), ("pp", "pp"), ("vpp", "vpp"), ("cp", "cp"), ("ep", "ep"),
         ("etp", "expert_tp"), ("dp", "dp"), ("mbs", "micro_batch_size"), ("schedule", "schedule"),
         ("recompute", "recompute"), ("zero", "zero_stage"), ("sp", "sequence_parallel"), ("rank order", "rank_order"))


def _dim_text(c: Candidate, attr: str) -> str:
    v = getattr(c, attr)
    if attr == "sequence_parallel":
        return "on" if v else "off"
    if attr == "num_gpus":
        return f"{v:,}"
    return str(v)


def plan_table(result: SearchResult, candidates: list[tuple[int | None, Candidate]], title: str) -> Table:
    """A table of candidates with their rank; dimensions equal in every row go to the caption."""
    tokens = result.train_tokens is not None
    varying = [(h, a) for h, a in _DIMS if len({getattr(c, a) for _, c in candidates}) > 1]
    fixed = [(h, a) for h, a in _DIMS if (h, a) not in varying]
    caption = ""
    if candidates and fixed:
        first = candidates[0][1]
        caption = "all: " + ", ".join(f"{h} {_dim_text(first, a)}" for h, a in fixed)
    t = Table(title=title, title_justify="left", caption=caption or None, caption_justify="left")
    t.add_column("#", justify="right")
    for h, _ in varying:
        t.add_column(h, justify="right")
    t.add_column("iteration", justify="right")
    t.add_column("MFU", justify="right")
    t.add_column("memory", justify="right")
    if tokens:
        t.add_column("days", justify="right")
        t.add_column("cost", justify="right")
    for rank, c in candidates:
        row = [str(rank) if rank else ""] + [_dim_text(c, a) for _, a in varying]
        mem = f"{c.peak_memory_bytes / 1e9:.1f} GB" + ("" if c.fits else " ✗")
        row += [_time(c.iteration_time_s), f"{c.mfu:.1%}" if c.mfu is not None else "–", mem]
        if tokens:
            row += [f"{c.training_days:,.1f}" if c.training_days is not None else "–", _money(c.cost_usd)]
        t.add_row(*row)
    return t


def print_search(result: SearchResult, console: Console | None = None, top: int = 10) -> None:
    """Print a search result."""
    console = console or Console()
    s = result.summary()
    stats = result.stats
    rate = stats.get("candidates_per_s")
    console.print(
        f"{s['valid']:,} valid plans ({s['fitting']:,} fit in memory) of {s['combinations']:,} combinations; "
        f"{sum(result.skipped.values()):,} skipped as invalid, {result.equivalent:,} merged as equivalent; "
        f"{stats['seconds']:.1f} s on {stats['backend']} ×{stats['workers']}"
        + (f" ({rate:,.0f} candidates/s)" if rate else ""), highlight=False)
    if result.skipped:
        t = Table(title="skipped (invalid combinations)", title_justify="left")
        t.add_column("field")
        t.add_column("count", justify="right")
        t.add_column("example")
        for k, v in sorted(result.skipped.items(), key=lambda kv: -kv[1]):
            t.add_row(k, f"{v:,}", result.skipped_examples.get(k, ""))
        console.print(t)
    objective = _OBJECTIVE_TEXT.get(result.objective, result.objective)
    constraint = f", finishing within {result.deadline_days:g} days" if result.deadline_days is not None else ""
    ranked = result.top(top)
    if not ranked:
        console.print(f"[bold red]no plan to rank[/bold red] by {objective}{constraint}"
                      + ("" if result.include_unfit else " among those that fit (--all ranks the others too)"))
        if result.deadline_days is not None:
            fastest = min((c for c in result.candidates if c.training_days is not None and c.fits),
                          key=lambda c: math.inf if c.training_days is None else c.training_days, default=None)
            if fastest is not None:
                console.print(f"the fastest plan that fits takes {fastest.training_days:,.1f} days: {fastest.plan()}",
                              highlight=False)
        if result.candidates and not any(c.fits for c in result.candidates):
            least = min(result.candidates, key=lambda c: (c.peak_memory_bytes, c.index))
            cap = result.stats.get("capacity_bytes") or 0.0
            console.print(f"nothing fits in {cap / 1e9:.1f} GB per GPU; the smallest peak is "
                          f"{least.peak_memory_bytes / 1e9:.1f} GB ({least.plan()}, mbs {least.micro_batch_size}, "
                          f"{least.recompute} recompute, ZeRO {least.zero_stage}): open more dimensions "
                          "(e.g. --recompute-granularity all, --zero-stage all, --pp all) or add GPUs", highlight=False)
        return
    title = f"best {len(ranked)} of {len(result.ranking):,} by {objective}{constraint}"
    console.print(plan_table(result, [(i + 1, c) for i, c in enumerate(ranked)], title))
    best = ranked[0]
    console.print(f"best: {best.plan()} on {best.num_gpus:,} GPUs — {explain(best)}", highlight=False)
    if len(result.pareto) > 1:
        ranks = {result.candidates[i].index: r + 1 for r, i in enumerate(result.ranking)}
        front = [(ranks.get(c.index), c) for c in result.pareto_candidates()]
        shown = front if len(front) <= 12 else [*front[:6], *front[-6:]]
        what = "(training days, $)" if result.train_tokens is not None else "(iteration time, $ per iteration)"
        console.print(plan_table(result, shown, f"Pareto front {what}: {len(front)} plans"
                                 + (" (first and last 6)" if len(front) > 12 else "")))
    if result.refinement is not None:
        ref = result.refinement
        t = Table(title=f"event-engine refinement of the best {ref.k}: ranking "
                        + ("CHANGED" if ref.changed else "unchanged"), title_justify="left")
        for col in ("plan", "analytic rank", "refined rank", "analytic", "event", "difference"):
            t.add_column(col, justify="right")
        for row in ref.rows:
            diff = row["relative_difference"]
            t.add_row(row["plan"], str(row["analytic_rank"]), str(row["refined_rank"] or "–"),
                      _time(row["analytic_iteration_time_s"]), _time(row["event_iteration_time_s"]),
                      f"{diff:+.1%}" if diff is not None else "–")
        console.print(t)
        for note in ref.notes:
            console.print(f"note: {note}", highlight=False)
