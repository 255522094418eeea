"""Search page (``trainsim search --html FILE``).

The best plan and why it wins (its exposed-time breakdown against the runner-up's, and the dimensions that differ),
the time-versus-cost Pareto front over every evaluated plan (hover shows the plan), the sortable ranked table, what
was skipped and why, and the event-engine refinement when there is one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainsim.metrics import gpu_hours
from trainsim.report.page import (
    Cell,
    Page,
    esc,
    fmt_money,
    fmt_time,
    num,
    text,
    time_unit,
)
from trainsim.report.predict import BREAKDOWN

if TYPE_CHECKING:  # pragma: no cover
    from trainsim.search.evaluate import Candidate
    from trainsim.search.result import SearchResult

#: Ranked plans listed in the table (the CSV/Parquet outputs hold all of them).
MAX_TABLE_ROWS = 500
_OBJECTIVE_TEXT = {"time": "iteration time", "training-time": "training time", "cost": "training cost",
                   "gpus": "fewest GPUs"}
_DIMS = (("GPUs", "num_gpus"), ("tp", "tp"), ("pp", "pp"), ("vpp", "vpp"), ("cp", "cp"), ("ep", "ep"), ("dp", "dp"),
         ("mbs", "micro_batch_size"), ("schedule", "schedule"), ("recompute", "recompute"), ("ZeRO", "zero_stage"),
         ("SP", "sequence_parallel"), ("rank order", "rank_order"))


def plan_text(c: Candidate) -> str:
    """The plan of a candidate in one line."""
    return (f"{c.plan()} on {c.num_gpus:,} GPUs; mbs {c.micro_batch_size}, {c.schedule}, recompute {c.recompute}, "
            f"ZeRO {c.zero_stage}" + (", SP" if c.sequence_parallel else ""))


def _axes(result: SearchResult) -> tuple[str, str, str, float, str]:
    """(x attribute, x label, y attribute, y scale, y label) of the Pareto plot: days and $ with a token budget,
    else iteration time and $ per iteration (the axes of :func:`trainsim.search.objectives.time_cost`)."""
    if result.train_tokens is not None:
        return "cost_usd", "training cost ($)", "training_days", 1.0, "training time (days)"
    times = [c.iteration_time_s for c in result.candidates if c.iteration_time_s is not None]
    scale, unit = time_unit(max(times) if times else 1.0)
    return "cost_per_iteration_usd", "cost per iteration ($)", "iteration_time_s", scale, f"iteration time ({unit})"


def _hover(c: Candidate, rank: int | None) -> str:
    head = f"#{rank} " if rank else ""
    days = f"{c.training_days:,.1f} days, {fmt_money(c.cost_usd)}<br>" if c.training_days is not None else ""
    mfu = f"{c.mfu:.1%}" if c.mfu is not None else "–"
    return (f"<b>{head}{esc(c.plan())}</b> on {c.num_gpus:,} GPUs<br>mbs {c.micro_batch_size}, {esc(c.schedule)}, "
            f"recompute {esc(c.recompute)}, ZeRO {c.zero_stage}{', SP' if c.sequence_parallel else ''}<br>"
            f"{days}iteration {fmt_time(c.iteration_time_s)}, MFU {mfu}<br>"
            f"memory {c.peak_memory_bytes / 1e9:.1f} GB{'' if c.fits else ' (does not fit)'}")


def _pareto(result: SearchResult) -> dict[str, Any]:
    xa, xl, ya, ys, yl = _axes(result)
    ranks = {i: r + 1 for r, i in enumerate(result.ranking)}
    front = set(result.pareto)
    best = result.ranking[0] if result.ranking else None
    groups: dict[str, list[int]] = {"fits": [], "does not fit": [], "Pareto front": []}
    for i, c in enumerate(result.candidates):
        if getattr(c, xa) is None or getattr(c, ya) is None:
            continue
        if i in front:
            groups["Pareto front"].append(i)
        elif c.fits:
            groups["fits"].append(i)
        else:
            groups["does not fit"].append(i)
    style = {"fits": {"color": "rgba(76,114,176,0.45)", "size": 7, "symbol": "circle"},
             "does not fit": {"color": "rgba(140,140,140,0.5)", "size": 7, "symbol": "x"},
             "Pareto front": {"color": "#c62828", "size": 10, "symbol": "diamond"}}
    traces = []
    for name, idx in groups.items():
        if not idx:
            continue
        if name == "Pareto front":
            idx = sorted(idx, key=lambda i: getattr(result.candidates[i], ya))
        cs = [result.candidates[i] for i in idx]
        traces.append({"type": "scatter", "mode": "lines+markers" if name == "Pareto front" else "markers",
                       "name": f"{name} ({len(idx)})", "x": [getattr(c, xa) for c in cs],
                       "y": [getattr(c, ya) / ys for c in cs], "marker": style[name],
                       "line": {"color": "#c62828", "width": 1.5, "shape": "hv"},
                       "hovertext": [_hover(c, ranks.get(i)) for i, c in zip(idx, cs, strict=True)],
                       "hoverinfo": "text"})
    if best is not None:
        c = result.candidates[best]
        traces.append({"type": "scatter", "mode": "markers+text", "name": "best", "x": [getattr(c, xa)],
                       "y": [getattr(c, ya) / ys], "text": ["best"], "textposition": "top right",
                       "marker": {"color": "#111827", "size": 16, "symbol": "star"},
                       "hovertext": [_hover(c, 1)], "hoverinfo": "text"})
    def axis_type(values: list[float]) -> str:  # log only when the values span more than a factor of 20
        v = [x for x in values if x and x > 0]
        return "log" if v and max(v) / min(v) > 20 else "linear"

    xs = [x for t in traces for x in t["x"]]
    ys = [y for t in traces for y in t["y"]]
    return {"data": traces, "layout": {
        "height": 460, "hovermode": "closest", "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        "xaxis": _axis(xl, axis_type(xs), tickprefix="$"), "yaxis": _axis(yl, axis_type(ys))}}


def _axis(title: str, kind: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"title": {"text": title}, "type": kind, **extra}
    if kind == "log":
        out["dtick"] = "D2"  # label 1, 2 and 5 of each decade only
    return out


def _why(result: SearchResult) -> tuple[dict[str, Any] | None, list[str]]:
    if len(result.ranking) < 2:
        return None, []
    best, runner = result.candidates[result.ranking[0]], result.candidates[result.ranking[1]]
    # Per iteration (the same tokens): seconds when ranking by time, GPU-hours when ranking by cost or GPUs.
    by_gpu_time = result.objective in ("cost", "gpus") and best.num_gpus != runner.num_gpus
    fb, fr = (gpu_hours(1.0, best.num_gpus), gpu_hours(1.0, runner.num_gpus)) if by_gpu_time else (1.0, 1.0)
    bb = {k: v * fb for k, v in (best.breakdown_s or {}).items()}
    rb = {k: v * fr for k, v in (runner.breakdown_s or {}).items()}
    keys = [k for k in BREAKDOWN if bb.get(k, 0) > 0 or rb.get(k, 0) > 0]
    if by_gpu_time:
        scale, unit, what = 1.0, "GPU-hours", "GPU-hours per iteration (time × GPUs: what the iteration costs)"
        fmt = lambda v: f"{v:,.2f} GPU-hours"  # noqa: E731
    else:
        scale, unit = time_unit(max(best.iteration_time_s or 0.0, runner.iteration_time_s or 0.0, 1e-12))
        what, fmt = f"exposed time per iteration ({unit})", fmt_time
    traces = [{"type": "bar", "orientation": "h", "name": BREAKDOWN[k][0], "y": ["#2 runner-up", "#1 best"],
               "x": [rb.get(k, 0.0) / scale, bb.get(k, 0.0) / scale], "marker": {"color": BREAKDOWN[k][1]},
               "hovertemplate": f"{BREAKDOWN[k][0]}: %{{x:.4g}} {unit}<extra>%{{y}}</extra>"} for k in keys]
    fig = {"data": traces, "layout": {"barmode": "stack", "height": 240,
                                      "xaxis": {"title": {"text": what}},
                                      "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
                                      "margin": {"l": 110, "r": 20, "t": 40, "b": 50}}}
    lines = []
    differ = [(h, a) for h, a in _DIMS if getattr(best, a) != getattr(runner, a)]
    if differ:
        lines.append("The two plans differ in " + ", ".join(f"{h} ({getattr(best, a)} vs {getattr(runner, a)})"
                                                            for h, a in differ) + ".")
    objective = _OBJECTIVE_TEXT.get(result.objective, result.objective)
    metric = {"time": ("iteration_time_s", fmt_time), "training-time": ("training_days", lambda d: f"{d:,.2f} days"),
              "cost": ("cost_usd", fmt_money), "gpus": ("num_gpus", lambda n: f"{n:,} GPUs")}.get(result.objective)
    if metric is not None:
        attr, f = metric
        vb, vr = getattr(best, attr), getattr(runner, attr)
        if vb is not None and vr is not None:
            lines.append(f"By {objective}: {f(vb)} for the best against {f(vr)} for the runner-up.")
    if best.iteration_time_s is not None and runner.iteration_time_s is not None:
        diffs = sorted(((rb.get(k, 0.0) - bb.get(k, 0.0), k) for k in keys), reverse=True)
        tiny = 0.005 * max(sum(bb.values()), sum(rb.values()), 1e-12)  # below 0.5 % of an iteration: noise
        gains = [f"{BREAKDOWN[k][0]} {fmt(d)} less" for d, k in diffs if d > tiny][:3]
        losses = [f"{BREAKDOWN[k][0]} {fmt(-d)} more" for d, k in diffs[::-1] if d < -tiny][:2]
        per_gpu = ""
        if best.num_gpus != runner.num_gpus:
            per_gpu = (f" It runs on {best.num_gpus:,} GPUs against {runner.num_gpus:,}: an iteration takes "
                       f"{fmt_time(best.iteration_time_s)} against {fmt_time(runner.iteration_time_s)} and costs "
                       f"{fmt_money(best.cost_per_iteration_usd)} against {fmt_money(runner.cost_per_iteration_usd)}.")
        what_per = "GPU time" if by_gpu_time else "time"
        if gains or losses:
            lines.append(f"Per iteration, in {what_per}, the best plan spends " + "; ".join(gains + losses) + "."
                         + per_gpu)
        elif per_gpu:
            lines.append(per_gpu.strip())
    return fig, lines


def _row(result: SearchResult, c: Candidate, rank: int, pareto: bool) -> list[Cell]:
    tokens = result.train_tokens is not None
    row = [num(rank, "{:d}"), num(c.num_gpus, "{:,}"), num(c.tp, "{:d}"), num(c.pp, "{:d}"), num(c.vpp, "{:d}"),
           num(c.cp, "{:d}"), num(c.ep, "{:d}"), num(c.dp, "{:d}"), num(c.micro_batch_size, "{:d}"),
           text(c.schedule), text(c.recompute), num(c.zero_stage, "{:d}"), text("on" if c.sequence_parallel else "off"),
           Cell(fmt_time(c.iteration_time_s), c.iteration_time_s),
           Cell(f"{c.mfu:.1%}" if c.mfu is not None else "–", c.mfu),
           Cell(f"{c.peak_memory_bytes / 1e9:.1f} GB" + ("" if c.fits else " ✗"), c.peak_memory_bytes)]
    if tokens:
        row += [num(c.training_days, "{:,.1f}"), Cell(fmt_money(c.cost_usd), c.cost_usd)]
    else:
        row += [Cell(fmt_money(c.cost_per_iteration_usd), c.cost_per_iteration_usd)]
    row.append(text("★" if pareto else ""))
    return row


def search_page(result: SearchResult, title: str | None = None) -> Page:
    """Build the search page (see the module docstring)."""
    s = result.summary()
    space = result.space
    model = space.get("model") or space.get("model_name") or ""
    objective = _OBJECTIVE_TEXT.get(result.objective, result.objective)
    constraint = f", within {result.deadline_days:g} days" if result.deadline_days is not None else ""
    page = Page(title or ("Plan search" + (f": {model}" if model else "")),
                f"ranked by {objective}{constraint}; {s['valid']:,} valid plans ({s['fitting']:,} fit in memory) of "
                f"{s['combinations']:,} combinations, searched in {result.stats.get('seconds', 0.0):.1f} s",
                kind="search")
    sec = page.section("Best plan", anchor="best")
    best = result.best
    if best is None:
        sec.banner("<b>No plan to rank.</b> " + esc(
            "Nothing fits in memory and meets the constraints" + ("" if result.include_unfit else
                                                                    " (--all ranks plans that do not fit too)")
            + "; see what was skipped below."), "bad")
    else:
        extra = (f"{best.training_days:,.1f} days, {fmt_money(best.cost_usd)}, " if best.training_days is not None
                 else "")
        sec.banner(f'<b id="best-plan">{esc(best.plan())}</b> on {best.num_gpus:,} GPUs '
                   f"(mbs {best.micro_batch_size}, {esc(best.schedule)}, recompute {esc(best.recompute)}, ZeRO "
                   f"{best.zero_stage}{', SP' if best.sequence_parallel else ''}): {esc(extra)}iteration "
                   f"{esc(fmt_time(best.iteration_time_s))}, MFU {best.mfu:.1%}", "good")
    cards: list[tuple[str, str, str]] = [
        ("combinations", f"{s['combinations']:,}", f"{sum(result.skipped.values()):,} invalid, "
         f"{result.equivalent:,} equivalent merged"),
        ("valid plans", f"{s['valid']:,}", f"{s['fitting']:,} fit in memory"),
        ("ranked", f"{s['ranked']:,}", f"by {objective}{constraint}"),
        ("Pareto front", f"{len(result.pareto):,}", "plans no other beats on both time and cost"),
    ]
    if best is not None and best.training_days is not None:
        cards.append(("best: training", f"{best.training_days:,.1f} days", fmt_money(best.cost_usd)))
    sec.cards(cards, id_prefix="search-")
    fig, lines = _why(result)
    if fig is not None:
        why = page.section("Why the best plan wins", "Where an iteration goes for the best plan and the runner-up "
                           "(exposed time per category; ranked by cost, weighted by the GPUs each plan uses).", "why")
        why.bullets(lines, ident="why-lines")
        why.figure(fig, "why", height=240)
    if any(c.estimated for c in result.candidates):
        page.section("Time against cost: the Pareto front", "Every evaluated plan; red diamonds are the Pareto front "
                     "(no other plan is both faster and cheaper). Hover a point for its plan; drag to zoom.",
                     "pareto").figure(_pareto(result), "pareto", height=460)
    ranked = result.top(MAX_TABLE_ROWS)
    pareto_set = {result.candidates[i].index for i in result.pareto}
    cols = ["#", "GPUs", "tp", "pp", "vpp", "cp", "ep", "dp", "mbs", "schedule", "recompute", "ZeRO", "SP",
            "iteration", "MFU", "memory"]
    cols += ["days", "cost"] if result.train_tokens is not None else ["$ / iteration"]
    cols.append("Pareto")
    intro = (f"The best {len(ranked):,} of {len(result.ranking):,} ranked plans; click a header to sort."
             + (" --csv or --parquet writes every evaluated plan." if len(result.ranking) > len(ranked) else ""))
    page.section("Ranked plans", intro, "ranked").table(
        cols, [_row(result, c, r + 1, c.index in pareto_set) for r, c in enumerate(ranked)], "ranked-table",
        highlight=[0], text_columns=(9, 10, 12, len(cols) - 1))
    sk = page.section("What was left out, and why", anchor="skipped")
    unfit = sum(1 for c in result.candidates if not c.fits)
    items = [f"{unfit:,} valid plans do not fit in GPU memory"
             + (" (ranked anyway: --all)" if result.include_unfit else " (not ranked; --all ranks them)")]
    if result.deadline_days is not None:
        late = sum(1 for c in result.candidates if c.fits and c.training_days is not None
                   and c.training_days > result.deadline_days)
        items.append(f"{late:,} plans that fit miss the {result.deadline_days:g}-day deadline")
    items.append(f"{result.equivalent:,} combinations merged with an identical one")
    for message, count in result.warnings.items():
        items.append(f"warning on {count:,} plans: {message}")
    sk.bullets(items)
    if result.skipped:
        sk.table(["field", "skipped", "example reason"],
                 [[text(k), num(v, "{:,}"), text(result.skipped_examples.get(k, ""))]
                  for k, v in sorted(result.skipped.items(), key=lambda kv: -kv[1])], "skipped-table",
                 text_columns=(0, 2))
    else:
        sk.paragraph("No combination was skipped as invalid.")
    if result.refinement is not None:
        ref = result.refinement
        rs = page.section(f"Event-engine refinement of the best {ref.k}",
                          "ranking " + ("CHANGED" if ref.changed else "unchanged") + " after re-predicting with the "
                          "event engine", "refinement")
        rs.table(["plan", "analytic rank", "refined rank", "analytic", "event", "difference"],
                 [[text(r["plan"]), num(r["analytic_rank"], "{:d}"), num(r["refined_rank"], "{:d}"),
                   Cell(fmt_time(r["analytic_iteration_time_s"]), r["analytic_iteration_time_s"]),
                   Cell(fmt_time(r["event_iteration_time_s"]), r["event_iteration_time_s"]),
                   num(r["relative_difference"], "{:+.1%}")] for r in ref.rows], "refinement-table",
                 text_columns=(0,))
        if ref.notes:
            rs.bullets(ref.notes)
    page.section("Search space", anchor="space").bullets(f"{k}: {v}" for k, v in space.items())
    return page


def write_search_report(result: SearchResult, path: str | os.PathLike[str], **options: Any) -> Path:
    """Write the search page to ``path`` (atomically); ``options`` go to :func:`search_page`."""
    return search_page(result, **options).write(path)
