"""What-if page (SMon): the on-call view of a straggler analysis (``trainsim whatif --html FILE``).

Shows the verdict and the headline numbers (S, M_S, M_W, GPU-hours wasted), the worker heatmap (DP rank × pipeline
stage, values on hover, the M_W workers outlined) with pattern hints in plain words, a step selector that switches
the heatmap to that step's per-worker slowdown (also by clicking a bar of the per-step chart), the slowdown per step
and per op type, and the actual against the ideal timeline of the chosen step.

Timelines are embedded for every analysed step when they fit in :data:`MAX_TIMELINE_EVENTS` slices; otherwise for
the slowest steps and the fastest one (the page says which, and how to write a Perfetto trace of any step).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainsim.io.frames import as_float
from trainsim.report.page import REDS, Page, esc, fmt_pct, fmt_time

if TYPE_CHECKING:  # pragma: no cover
    from trainsim.whatif.result import WhatIfResult

#: Largest number of timeline slices (ops × ranks × steps, both runs) embedded in a page (about 1 MB).
MAX_TIMELINE_EVENTS = 40_000
#: A stage or DP rank is "hot" when its slowdown exceeds the median of its peers by this much.
HOT_EXCESS = 0.05

#: Op types grouped for the timeline legend: (label, colour, is communication).
TIMELINE_GROUPS: tuple[tuple[str, str, bool], ...] = (
    ("forward", "#4C72B0", False),
    ("backward", "#DD8452", False),
    ("optimizer", "#55A868", False),
    ("pipeline send/recv", "#8172B3", True),
    ("DP / global collectives", "#C44E52", True),
)
_GROUP_OF = {
    "forward-compute": 0, "backward-compute": 1, "optimizer": 2, "forward-send": 3, "forward-recv": 3,
    "backward-send": 3, "backward-recv": 3, "params-all-gather": 4, "grads-reduce-scatter": 4,
    "separate-grads-all-reduce": 4, "layernorm-grads-all-reduce": 4, "embedding-grads-all-reduce": 4,
    "optimizer-clip-main-grad": 4,
}

_ACTIONS = {
    "worker": "Find the outlined worker(s) below and check or cordon that machine (GPU clocks, thermals, ECC, NIC).",
    "last-stage": "Rebalance the pipeline: give the last stage fewer layers (it also computes the loss), e.g. "
                  "--decoder-last-pipeline-num-layers.",
    "sequence-imbalance": "Balance the work per micro-batch (pack or sort sequences by length); the hot cells move "
                          "from step to step.",
    "none": "No single cause dominates; the numbers below show where the remaining slowdown sits.",
}


def _r(x: float, digits: int = 4) -> float | None:
    v = float(x)
    return round(v, digits) if np.isfinite(v) else None


def pattern_hints(result: WhatIfResult) -> list[str]:
    """Plain-words reading of the worker heatmap: hot cells, rows, columns, or a diffuse pattern, and whether the
    worst worker stays the same from step to step."""
    from trainsim.whatif.heatmap import step_worker_matrix, worker_matrix

    mat, dps, stages = worker_matrix(result)
    ranks = result.per_rank.reset_index().set_index(["dp_rank", "stage"])["rank"]
    s_stage = np.array([result.slowdown_by_stage[s] for s in stages])
    s_dp = np.array([result.slowdown_by_dp_rank[d] for d in dps])
    hot_stages = [stages[i] for i in np.flatnonzero(s_stage - np.median(s_stage) >= HOT_EXCESS)]
    hot_dps = [dps[j] for j in np.flatnonzero(s_dp - np.median(s_dp) >= HOT_EXCESS)] if len(dps) > 1 else []
    hints: list[str] = []
    if result.slowdown < 1.05:
        hints.append(f"Cool map: the job runs at S = {result.slowdown:.3f}, within 5 % of its ideal; stragglers "
                     "cost little.")
    if hot_stages and hot_dps and len(hot_dps) < len(dps):
        cells = [(d, s) for s in hot_stages for d in hot_dps]
        named = ", ".join(f"rank {int(ranks.loc[(d, s)])} (dp {d}, stage {s}, {mat[stages.index(s), dps.index(d)]:.2f})"
                          for d, s in cells[:4])
        hints.append(f"Hot cell{'s' if len(cells) > 1 else ''}: {named}. A single slow worker holds up its pipeline "
                     "and, through the data-parallel collectives, every other replica: suspect that machine.")
    elif hot_stages:
        rows = ", ".join(f"stage {s} (S = {result.slowdown_by_stage[s]:.2f})" for s in hot_stages)
        hints.append(f"Hot row: {rows} is slower than the other stages in every DP rank. The pipeline is "
                     "unbalanced (too many layers, or the loss on the last stage), or the whole stage's work grows "
                     "with the data (long sequences).")
    elif hot_dps:
        cols = ", ".join(f"dp {d} (S = {result.slowdown_by_dp_rank[d]:.2f})" for d in hot_dps[:6])
        hints.append(f"Hot column: {cols} is slow on every stage: that replica gets more work (longer sequences) or "
                     "shares a slow host, switch or data loader.")
    elif result.slowdown >= 1.05:
        hints.append(f"Diffuse map: S = {result.slowdown:.3f} but no worker, stage or DP rank stands out by "
                     f"{HOT_EXCESS:.0%}: the slowdown is spread over the job.")
    if len(result.steps) >= 3 and mat.size > 1:
        worst = []
        for step in result.steps:
            m = step_worker_matrix(result, step)
            i, j = np.unravel_index(int(np.nanargmax(m)), m.shape)
            worst.append((dps[int(j)], stages[int(i)]))
        top = max(set(worst), key=worst.count)
        n_same, n = worst.count(top), len(worst)
        stages_w = [c[1] for c in worst]
        dps_w = [c[0] for c in worst]
        top_stage = max(set(stages_w), key=stages_w.count)
        top_dp = max(set(dps_w), key=dps_w.count)
        if n_same >= 0.8 * n:
            hints.append(f"Persistent: the same worker (dp {top[0]}, stage {top[1]}) is the worst in {n_same} of "
                         f"{n} steps — a property of the machine or its stage, not of the data.")
        elif stages_w.count(top_stage) >= 0.8 * n and len(stages) > 1:
            hints.append(f"Persistent stage: the worst worker sits on stage {top_stage} in "
                         f"{stages_w.count(top_stage)} of {n} steps while its DP rank changes ({len(set(dps_w))} "
                         "different ranks): the stage is heavier than the others, not one machine; which replica is "
                         "slowest moves with the data.")
        elif dps_w.count(top_dp) >= 0.8 * n and len(dps) > 1:
            hints.append(f"Persistent replica: the worst worker is in DP rank {top_dp} in {dps_w.count(top_dp)} of "
                         f"{n} steps (its stage varies).")
        else:
            hints.append(f"Moving: the worst worker changes from step to step ({len(set(worst))} different workers "
                         f"over {n} steps; the most frequent, dp {top[0]} stage {top[1]}, in {n_same}) — a sign of "
                         "data-dependent work such as sequence-length imbalance. Use the step selector to watch it.")
    cv, corr = result.forward_time_cv, result.fwd_bwd_correlation
    if cv is not None and corr is not None:
        hints.append(f"Forward times vary by CV = {cv:.2f} within a rank and forward/backward times of a micro-batch "
                     f"correlate at {corr:.2f}" + (" — micro-batches carry unequal work." if cv >= 0.05 and corr >= 0.5
                                                   else "."))
    return hints


def _heatmap(result: WhatIfResult) -> dict[str, Any]:
    from trainsim.whatif.heatmap import worker_matrix

    mat, dps, stages = worker_matrix(result)
    ranks = result.per_rank.reset_index().set_index(["dp_rank", "stage"])["rank"]
    custom = [[[int(ranks.loc[(d, s)]), _r(result.slowdown_by_dp_rank[d]), _r(result.slowdown_by_stage[s])]
               for d in dps] for s in stages]
    zmax = max(1.2, float(np.nanmax(mat)))
    for step in result.steps:
        from trainsim.whatif.heatmap import step_worker_matrix

        zmax = max(zmax, float(np.nanmax(step_worker_matrix(result, step))))
    shapes = [{"type": "rect", "x0": dps.index(d) - 0.5, "x1": dps.index(d) + 0.5, "y0": stages.index(s) - 0.5,
               "y1": stages.index(s) + 0.5, "line": {"color": "#1f4e99", "width": 3}, "xref": "x", "yref": "y"}
              for d, s in result.worker_share_cells]
    annotate = len(dps) <= 16 and mat.size <= 256
    trace: dict[str, Any] = {
        "type": "heatmap", "z": [[_r(v) for v in row] for row in mat], "x": list(range(len(dps))),
        "y": list(range(len(stages))), "customdata": custom, "zmin": 1.0, "zmax": round(zmax, 3),
        "colorscale": REDS, "xgap": 1, "ygap": 1, "colorbar": {"title": {"text": "slowdown"}, "thickness": 14},
        "hovertemplate": "rank %{customdata[0]} · dp %{x} · stage %{y}<br>worker slowdown %{z:.3f}<br>"
                         "S of its DP rank %{customdata[1]:.3f}, of its stage %{customdata[2]:.3f}<extra></extra>",
    }
    if annotate:
        trace["texttemplate"] = "%{z:.2f}"
        trace["textfont"] = {"size": 11}
    height = int(min(max(260, 46 * len(stages) + 140), 700))
    return {"data": [trace], "layout": {
        "height": height, "shapes": shapes, "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
        "xaxis": {"title": {"text": "DP rank"}, "tickmode": "array", "tickvals": list(range(len(dps))),
                  "ticktext": [str(d) for d in dps], "showgrid": False, "constrain": "domain"},
        "yaxis": {"title": {"text": "pipeline stage"}, "tickmode": "array", "tickvals": list(range(len(stages))),
                  "ticktext": [str(s) for s in stages], "autorange": "reversed", "showgrid": False}}}


def _per_step(result: WhatIfResult) -> dict[str, Any]:
    ps = result.per_step
    steps = [str(s) for s in ps.index]
    s_vals = ps["slowdown"].to_numpy(float)
    hover = [f"step {s}: S = {v:.3f}<br>actual {fmt_time(a)}, ideal {fmt_time(i)}<br>click to inspect"
             for s, v, a, i in zip(steps, s_vals, ps["actual_s"], ps["ideal_s"], strict=True)]
    return {"data": [{"type": "bar", "x": steps, "y": [_r(v) for v in s_vals], "hovertext": hover,
                      "hoverinfo": "text", "marker": {"color": [_r(v) for v in s_vals], "colorscale": REDS,
                                                      "cmin": 1.0, "cmax": max(1.2, float(s_vals.max()))},
                      "name": "S per step"}],
            "layout": {"height": 300, "xaxis": {"title": {"text": "step (click a bar to inspect it)"},
                                                "type": "category"},
                       "yaxis": {"title": {"text": "slowdown S"}, "range": [min(0.95, float(s_vals.min()) - 0.02),
                                                                           float(s_vals.max()) * 1.03]},
                       "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                                   "line": {"color": "#6b7280", "dash": "dot"}}],
                       "margin": {"l": 60, "r": 20, "t": 20, "b": 60}}}


def _per_optype(result: WhatIfResult) -> dict[str, Any]:
    items = sorted(result.slowdown_by_optype.items(), key=lambda kv: kv[1])
    lo, hi = min(0.98, items[0][1] - 0.01), items[-1][1] * 1.02
    return {"data": [{"type": "bar", "orientation": "h", "y": [k for k, _ in items], "x": [_r(v) for _, v in items],
                      "marker": {"color": ["#c62828" if v >= 1.05 else "#94a3b8" for _, v in items]},
                      "hovertemplate": "%{y}: S_t = %{x:.3f}<extra></extra>"}],
            "layout": {"height": max(240, 26 * len(items) + 90),
                       "xaxis": {"title": {"text": "S_t: ideal run with this op type at its traced times / ideal"},
                                 "range": [lo, hi]},
                       "yaxis": {"automargin": True}, "margin": {"l": 200, "r": 20, "t": 20, "b": 50}}}


def timeline_steps(result: WhatIfResult, budget: int = MAX_TIMELINE_EVENTS) -> list[int]:
    """Steps whose timelines the page embeds: all if they fit in ``budget`` slices, else the slowest ones and the
    fastest."""
    w = result.session
    if w is None:
        return []
    per_step = w.model.num_ops * len(w.dp_ranks) * 2
    k = max(1, budget // max(per_step, 1))
    order = sorted(result.slowdown_by_step, key=lambda s: -result.slowdown_by_step[s])
    if k >= len(order):
        return sorted(order)
    chosen = order[: max(k - 1, 1)] + ([order[-1]] if k > 1 else [])
    return sorted(set(chosen))


def _timeline_data(result: WhatIfResult, steps: list[int]) -> dict[str, Any]:
    """Compact per-step slices of the actual and the ideal run: row, group, start and duration (µs)."""
    w = result.session
    assert w is not None
    ranks = w.arrays.ranks
    rows = [(int(ranks[s, d]), int(dp), s) for s in range(ranks.shape[0]) for d, dp in enumerate(w.dp_ranks)]
    row_of = {r: i for i, (r, _, _) in enumerate(rows)}
    out: dict[str, Any] = {"rows": [f"st {s} · dp {dp} · r{r}" for r, dp, s in rows],
                           "groups": [[g[0], g[1], g[2]] for g in TIMELINE_GROUPS], "steps": {}}
    for which, key in (("actual", "a"), ("ideal", "i")):
        ev = w.timeline_events(which, steps)  # type: ignore[arg-type]
        ev = ev[(ev["dur_s"] > 0) & ev["name"].isin(list(_GROUP_OF))]
        step_col = ev["step"].to_numpy()
        for step in np.unique(step_col):
            sub = ev[step_col == step]
            ts = sub["ts_s"].to_numpy(dtype=float)
            d = out["steps"].setdefault(str(int(step)), {})
            d[key] = {"r": [row_of[int(p)] for p in sub["pid"].to_numpy()],
                      "g": [_GROUP_OF[str(n)] for n in sub["name"].to_numpy()],
                      "s": np.rint((ts - ts.min()) * 1e6).astype(np.int64).tolist(),
                      "d": np.maximum(np.rint(sub["dur_s"].to_numpy(dtype=float) * 1e6), 1).astype(np.int64).tolist()}
    return out


_JS = r"""
(function () {
  var D = window.TRAINSIM_DATA.whatif;
  var sel = document.getElementById('step-select');
  var caption = document.getElementById('step-caption');
  var tlNote = document.getElementById('timeline-note');
  function fmt(x, n) { return (x === null || x === undefined) ? 'n/a' : Number(x).toFixed(n); }
  function showHeatmap(key) {
    var h = key === 'all' ? D.mean : D.by_step[key];
    Plotly.restyle('heatmap', {z: [h.z], customdata: [h.custom]}, [0]);
    if (key === 'all') {
      caption.textContent = 'All ' + D.steps.length + ' analysed steps (mean): S = ' + fmt(D.slowdown, 3) +
        '. Worst worker: ' + h.worst + '.';
    } else {
      caption.textContent = 'Step ' + key + ': S = ' + fmt(h.s, 3) + ', actual ' + fmt(h.actual_ms, 1) +
        ' ms vs ideal ' + fmt(h.ideal_ms, 1) + ' ms. Worst worker: ' + h.worst + '.';
    }
    var colors = D.steps.map(function (s) { return String(s) === key ? '#1f4e99' : null; });
    Plotly.restyle('per-step', {'marker.line.color': [colors.map(function (c) { return c || 'rgba(0,0,0,0)'; })],
                                'marker.line.width': [colors.map(function (c) { return c ? 3 : 0; })]}, [0]);
  }
  function segTraces(run, axis, showlegend) {
    return window.TRAINSIM_SEGMENTS(run, {groups: D.timeline.groups, rows: D.timeline.rows, unit: D.unit,
      unitUs: D.unit_us, plotHeight: D.timeline_height / 2 - 60, xaxis: axis[0], yaxis: axis[1],
      showlegend: showlegend});
  }
  function showTimeline(key) {
    var div = document.getElementById('timeline');
    var step = key;
    if (key === 'all') { step = String(D.timeline_default); }
    var T = D.timeline.steps[step];
    if (!T) {
      tlNote.textContent = 'The timeline of step ' + step + ' is not embedded in this page (only steps ' +
        Object.keys(D.timeline.steps).join(', ') + ' are, to keep the file small). Write it as a Perfetto trace: ' +
        D.perfetto_hint.replace('STEP', step);
      Plotly.react(div, [], {height: 120, xaxis: {visible: false}, yaxis: {visible: false},
                             annotations: [{text: 'timeline of step ' + step + ' not embedded', showarrow: false,
                                            xref: 'paper', yref: 'paper', x: 0.5, y: 0.5}]}, D.config);
      return;
    }
    tlNote.textContent = (key === 'all' ? 'Slowest step ' + step + ' shown; choose a step above. ' : 'Step ' + step +
      '. ') + 'Top: as traced (communication includes waiting for peers). Bottom: the same step simulated with ' +
      'every operation at its ideal duration. Drag to zoom, double-click to reset.';
    var rows = D.timeline.rows;
    var traces = segTraces(T.a, ['x', 'y'], true).concat(segTraces(T.i, ['x', 'y2'], false));
    var layout = {height: D.timeline_height, hovermode: 'closest', margin: {l: 150, r: 20, t: 30, b: 50},
                  legend: {orientation: 'h', y: 1.04, yanchor: 'bottom'}, plot_bgcolor: '#ffffff',
                  xaxis: {title: {text: D.unit + ' from the start of the step'}, gridcolor: '#e5e7eb', anchor: 'y2'},
                  yaxis: {domain: [0.53, 1], type: 'category', categoryorder: 'array', categoryarray: rows,
                          range: [rows.length - 0.5, -0.5], title: {text: 'actual'}, tickfont: {size: 9}},
                  yaxis2: {domain: [0, 0.47], type: 'category', categoryorder: 'array', categoryarray: rows,
                           range: [rows.length - 0.5, -0.5], title: {text: 'ideal'}, tickfont: {size: 9}}};
    Plotly.react(div, traces, layout, D.config);
  }
  function show(key) { showHeatmap(key); showTimeline(key); }
  Promise.all(Object.values(window.TRAINSIM_FIGS)).then(function () {
    sel.addEventListener('change', function () { show(sel.value); });
    document.getElementById('per-step').on('plotly_click', function (ev) {
      sel.value = String(ev.points[0].x); show(sel.value);
    });
    show(sel.value);
    document.body.setAttribute('data-ready', '1');
  });
})();
"""


def _worst_text(mat: np.ndarray, dps: list[int], stages: list[int], ranks: Any) -> str:
    i, j = np.unravel_index(int(np.nanargmax(mat)), mat.shape)
    d, s = dps[int(j)], stages[int(i)]
    return f"rank {int(ranks.loc[(d, s)])} (dp {d}, stage {s}) at {float(mat[i, j]):.3f}"


def whatif_page(result: WhatIfResult, *, trace_name: str | None = None, timeline_file: str | None = None,
                max_timeline_events: int = MAX_TIMELINE_EVENTS) -> Page:
    """Build the what-if page of ``result`` (see the module docstring).

    ``trace_name``: shown in the Perfetto hint; ``timeline_file``: a Perfetto JSON written beside the page, linked.
    """
    from trainsim.report.page import PLOTLY_CONFIG
    from trainsim.whatif.heatmap import step_worker_matrix, worker_matrix

    m = result.meta
    traced = len(result.per_rank)
    page = Page(f"Straggler what-if: job {m.trial_name}",
                f"dp {m.dp_size} × pp {m.pp_size} × tp {m.tp_size}" + (f" × dsp {m.dsp_size}" if m.dsp_size > 1 else "")
                + (f", vpp {m.vpp_size}" if m.vpp_size > 1 else "") + f" = {m.world_size} GPUs ({traced} traced), "
                f"{len(result.steps)} analysed steps", kind="whatif")

    tone = {"worker": "bad", "last-stage": "warn", "sequence-imbalance": "warn", "none": "good"}[result.verdict] \
        if result.verdict in _ACTIONS else ""
    s = page.section("Verdict", anchor="verdict")
    s.banner(f'<b id="verdict">verdict: {esc(result.verdict)}</b> — {esc(result.verdict_reason)}.<br>'
             f"{esc(_ACTIONS.get(result.verdict, ''))}", tone)
    wasted = result.wasted_gpu_hours()
    wasted_text = f"{wasted:,.1f}" if wasted >= 10 else f"{wasted:.3g}"
    s.cards([
        ("slowdown S", f"{result.slowdown:.3f}", "T(original) / T(ideal): how much faster without stragglers",
         "bad" if result.slowdown >= 1.1 else "warn" if result.slowdown >= 1.05 else "good"),
        ("GPU time wasted", fmt_pct(result.wasted_gpu_fraction), "1 − 1/S of every GPU-hour"),
        ("GPU-hours wasted", wasted_text, f"over the {len(result.steps)} analysed steps on {m.world_size} GPUs; "
         f"{result.wasted_gpu_hours(1000):,.0f} per 1,000 steps"),
        ("last-stage share M_S", fmt_pct(result.last_stage_share, 0), "of the slowdown removed by idealizing the "
         "last stage"),
        ("worker share M_W", fmt_pct(result.worker_share, 0), f"explained by the worst {len(result.worker_share_cells)}"
         " worker(s), outlined in the heatmap"),
        ("step time", fmt_time(result.step_time_actual_s), f"actual; ideal {fmt_time(result.step_time_ideal_s)}"),
        ("discrepancy", f"{result.discrepancy:.3f}", "T(actual) / T(original): launch delays the model does not "
         "explain"),
    ], id_prefix="head-")

    mat, dps, stages = worker_matrix(result)
    ranks = result.per_rank.reset_index().set_index(["dp_rank", "stage"])["rank"]
    worst_steps = sorted(result.slowdown_by_step, key=lambda k: -result.slowdown_by_step[k])
    options = ['<option value="all">all steps (mean)</option>'] + [
        f'<option value="{st}">step {st} — S {result.slowdown_by_step[st]:.3f}</option>' for st in result.steps]
    h = page.section("Who is slow: worker heatmap", "Each cell is one traced worker (DP rank × pipeline stage), "
                     "coloured by min(S of its DP rank, S of its stage): a worker is only as guilty as both. "
                     "Outlined: the workers counted in M_W. Hover a cell for its numbers.", "heatmap")
    h.html('<p><label for="step-select"><b>Step:</b></label> <select id="step-select">' + "".join(options)
           + '</select> <span class="note">(or click a bar in the per-step chart)</span></p>'
           '<p id="step-caption" class="note"></p>')
    h.html('<div class="row"><div class="col" style="flex:3 1 520px">')
    h.figure(_heatmap(result), "heatmap", height=int(min(max(260, 46 * len(stages) + 140), 700)))
    h.html('</div><div class="col" style="flex:2 1 320px"><h3 style="margin:4px 0;font-size:15px">What the pattern '
           'says</h3>')
    h.bullets(pattern_hints(result), ident="hints")
    h.html('<p class="note">A single dark cell: a bad worker. A dark row: a slow stage (often the last). Scattered '
           'cells that move between steps: unequal micro-batches (sequence lengths).</p></div></div>')

    st = page.section("When and what: slowdown per step and per op type",
                      "Left: S of every analysed step (click a bar to inspect that step). Right: S_t per op type, "
                      "the ideal run with only that op type at its traced times, over the ideal.", "steps")
    st.html('<div class="row"><div class="col">')
    st.figure(_per_step(result), "per-step", height=300)
    st.html('</div><div class="col">')
    st.figure(_per_optype(result), "per-optype", height=max(240, 26 * len(result.slowdown_by_optype) + 90))
    st.html("</div></div>")

    by_step: dict[str, Any] = {}
    zmat = result.per_step
    for step in result.steps:
        sm = step_worker_matrix(result, step)
        d_vals = result.step_by_dp_rank.loc[step, dps].to_numpy(float)
        s_vals = result.step_by_stage.loc[step, stages].to_numpy(float)
        by_step[str(step)] = {
            "z": [[_r(v) for v in row] for row in sm],
            "custom": [[[int(ranks.loc[(d, s)]), _r(d_vals[j]), _r(s_vals[i])] for j, d in enumerate(dps)]
                       for i, s in enumerate(stages)],
            "s": _r(result.slowdown_by_step[step]), "worst": _worst_text(sm, dps, stages, ranks),
            "actual_ms": _r(as_float(zmat.loc[step, "actual_s"]) * 1e3, 2),
            "ideal_ms": _r(as_float(zmat.loc[step, "ideal_s"]) * 1e3, 2)}
    mean = {"z": [[_r(v) for v in row] for row in mat],
            "custom": [[[int(ranks.loc[(d, s)]), _r(result.slowdown_by_dp_rank[d]), _r(result.slowdown_by_stage[s])]
                        for d in dps] for s in stages], "worst": _worst_text(mat, dps, stages, ranks)}

    t = page.section("Actual vs ideal timeline of the chosen step", "", "timeline")
    t.html('<p id="timeline-note" class="note"></p>')
    if timeline_file:
        t.html(f'<p class="note">Full Perfetto/Chrome trace written beside this page: <a href="{esc(timeline_file)}">'
               f"{esc(timeline_file)}</a> (open it in ui.perfetto.dev or chrome://tracing).</p>")
    tl_steps = timeline_steps(result, max_timeline_events) if result.session is not None else []
    n_rows = traced
    tl_height = int(min(max(360, 2 * (12 * n_rows) + 160), 1700))
    unit_s, unit = (1.0, "s") if result.step_time_actual_s >= 2.0 else (1e-3, "ms")
    if tl_steps:
        t.figure({"data": [], "layout": {"height": tl_height}}, "timeline", height=tl_height)
        timeline = _timeline_data(result, tl_steps)
    else:
        t.paragraph("The trace session is not available (a result loaded without its trace): no timeline.")
        timeline = {"rows": [], "groups": [], "steps": {}}
    src = trace_name or f"trace-{m.trial_name}.parquet"
    page.embed("whatif", {
        "steps": [int(x) for x in result.steps], "slowdown": result.slowdown, "mean": mean, "by_step": by_step,
        "timeline": timeline, "timeline_height": tl_height, "unit": unit, "unit_us": unit_s * 1e6,
        "config": PLOTLY_CONFIG,
        "timeline_default": worst_steps[0] if tl_steps else None,
        "perfetto_hint": f"trainsim whatif {src} --timeline step-STEP.json --ideal-timeline step-STEP-ideal.json "
                         "--timeline-steps STEP",
    })
    page.script(_JS)
    page.defer_ready = True
    return page


def write_whatif_report(result: WhatIfResult, path: str | os.PathLike[str], **options: Any) -> Path:
    """Write the what-if page of ``result`` to ``path`` (atomically); ``options`` go to :func:`whatif_page`."""
    return whatif_page(result, **options).write(path)

