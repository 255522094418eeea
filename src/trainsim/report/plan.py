"""Plan page (``trainsim plan --html FILE``): how big a model a GPU budget trains compute-optimally.

The budget, the naive Chinchilla point (100 % utilization) against the realistic one (the largest shape whose
Chinchilla tokens train within the budget with its best plan), and every evaluated shape: training days against
parameters with the budget line (hover shows the plan), plus a sortable table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainsim.report.page import Cell, Page, esc, fmt_money, num, text


def _plan(p: dict[str, Any] | None) -> str:
    if not p:
        return "–"
    out = f"tp {p['tp']} · pp {p['pp']}" + (f" · vpp {p['vpp']}" if p.get("vpp", 1) > 1 else "") + f" · dp {p['dp']}"
    return out + f", mbs {p['micro_batch_size']}, recompute {p['recompute']}"


def _shapes(d: dict[str, Any]) -> dict[str, Any]:
    ev = d["search"]["evaluated"]
    budget_days = d["budget"]["days"]
    ok = [e for e in ev if e["days"] is not None and e["days"] <= budget_days]
    late = [e for e in ev if e["days"] is not None and e["days"] > budget_days]

    def trace(rows: list[dict[str, Any]], name: str, color: str, symbol: str) -> dict[str, Any]:
        return {"type": "scatter", "mode": "markers", "name": f"{name} ({len(rows)})",
                "x": [e["params"] / 1e9 for e in rows], "y": [e["days"] for e in rows],
                "marker": {"color": color, "size": 9, "symbol": symbol},
                "hovertext": [f"<b>{e['params'] / 1e9:,.1f} B</b> ({e['layers']} layers × {e['hidden_size']})<br>"
                              f"{e['tokens'] / 1e12:,.2f} T tokens in {e['days']:,.1f} days<br>"
                              f"MFU {e['mfu']:.1%} with {esc(e['plan'] or '–')}" for e in rows],
                "hoverinfo": "text"}

    traces = [trace(ok, "trains within the budget", "#2e7d32", "circle"),
              trace(late, "takes longer", "#9ca3af", "circle-open")]
    opt = d.get("optimal")
    if opt:
        traces.append({"type": "scatter", "mode": "markers+text", "name": "realistic optimum",
                       "x": [opt["params"] / 1e9], "y": [opt["days"]], "text": ["realistic"],
                       "textposition": "top left", "marker": {"color": "#111827", "size": 16, "symbol": "star"},
                       "hoverinfo": "skip"})
    naive = d["naive"]
    shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": budget_days, "y1": budget_days,
               "line": {"color": "#c62828", "dash": "dash", "width": 2}},
              {"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": naive["params"] / 1e9,
               "x1": naive["params"] / 1e9, "line": {"color": "#1f4e99", "dash": "dot", "width": 2}}]
    notes = [{"xref": "paper", "x": 0, "y": budget_days, "yanchor": "bottom", "xanchor": "left", "showarrow": False,
              "text": f"budget {budget_days:g} days", "font": {"color": "#c62828"}},
             {"yref": "paper", "y": 1, "x": naive["params"] / 1e9, "xanchor": "right", "yanchor": "top",
              "showarrow": False, "text": "naive (100 % utilization) ", "font": {"color": "#1f4e99"}}]
    return {"data": traces, "layout": {
        "height": 440, "hovermode": "closest", "shapes": shapes, "annotations": notes,
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        "xaxis": {"title": {"text": "parameters (billions)"}, "rangemode": "tozero"},
        "yaxis": {"title": {"text": "days to train on its Chinchilla tokens"}, "rangemode": "tozero"}}}


def plan_page(result: Any) -> Page:
    """Build the plan page of a :class:`~trainsim.plan.PlanResult` (or its ``to_json_dict()``)."""
    d = result if isinstance(result, dict) else result.to_json_dict()
    b, n, o, s = d["budget"], d["naive"], d.get("optimal"), d["search"]
    page = Page("Compute-optimal model for a GPU budget",
                f"{b['num_gpus']:,} GPUs × {b['days']:g} days; {s['template']} family; "
                f"{s['shapes_evaluated']} of {s['shapes_considered']} shapes evaluated in {s['seconds']:.1f} s",
                kind="plan")
    sec = page.section("Answer", anchor="answer")
    if o:
        sec.banner(f'<b id="optimal">{o["params"] / 1e9:,.1f} B parameters</b> on {o["tokens"] / 1e12:,.2f} T tokens '
                   f"({o['layers']} layers × hidden {o['hidden_size']}) train in {o['days']:,.1f} days at MFU "
                   f"{o['mfu']:.1%} with {esc(_plan(o['plan']))}. At 100 % utilization Chinchilla would say "
                   f"{n['params'] / 1e9:,.1f} B on {n['tokens'] / 1e12:,.2f} T tokens"
                   + (f", which would really take {n['days']:,.1f} days." if n.get("days") else "."), "good")
    else:
        sec.banner("<b>No shape trains its Chinchilla tokens within the budget.</b>", "bad")
    sec.cards([
        ("budget", f"{b['gpu_hours']:,.0f} GPU-h", f"{fmt_money(b['cost_usd'])} at ${b['price_per_gpu_hour']:.2f}/GPU-h"
         + ("; limited by dollars" if b["limited_by"] == "budget" else "")),
        ("compute at 100 %", f"{b['compute_flops']:.3g} FLOP", "every GPU at peak for the whole time"),
        ("naive optimum", f"{n['params'] / 1e9:,.1f} B", f"{n['tokens'] / 1e12:,.2f} T tokens"
         + (f"; really {n['days']:,.1f} days" if n.get("days") else "")),
        ("realistic optimum", f"{o['params'] / 1e9:,.1f} B" if o else "–",
         f"{o['tokens'] / 1e12:,.2f} T tokens, MFU {o['mfu']:.1%}" if o else "nothing fits the budget"),
        ("realistic cost", fmt_money(o["cost_usd"]) if o else "–", f"{o['days']:,.1f} days" if o else ""),
    ], id_prefix="plan-")
    page.section("Every evaluated shape", "Each shape trained on its Chinchilla tokens with its best plan: the "
                 "realistic optimum is the largest one under the budget line.", "shapes").figure(
        _shapes(d), "shapes", height=440)
    rows = [[num(e["params"] / 1e9, "{:,.1f}"), num(e["layers"], "{:d}"), num(e["hidden_size"], "{:,}"),
             num(e["tokens"] / 1e12, "{:,.2f}"), num(e["days"], "{:,.1f}"),
             Cell(f"{e['mfu']:.1%}" if e["mfu"] is not None else "–", e["mfu"]), text(e["plan"] or "–")]
            for e in s["evaluated"]]
    page.section("Shapes", "Click a header to sort.", "table").table(
        ["params (B)", "layers", "hidden", "tokens (T)", "days", "MFU", "best plan"], rows, "shapes-table",
        text_columns=(6,))
    return page


def write_plan_report(result: Any, path: str | os.PathLike[str]) -> Path:
    """Write the plan page to ``path`` (atomically)."""
    return plan_page(result).write(path)
