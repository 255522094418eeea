"""Prediction page (``trainsim predict --html FILE``, both engines).

Both engines: the summary (iteration time, tokens/s, MFU/HFU, training days and cost), the exposed-time breakdown
(it sums to the iteration) and memory per stage against the GPU's capacity. The event engine adds per-stage busy and
idle time, the per-GPU stream timelines of one iteration (zoomable; one row per stream of each simulated GPU, i.e.
each pipeline stage of each replica class) and memory over time per stage; injected stragglers (slow GPUs, stages,
links, sequence-length variation) are named at the top and their rows are shaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainsim.report.page import PALETTE, Page, esc, fmt_money, fmt_pct, fmt_time, time_unit

if TYPE_CHECKING:  # pragma: no cover
    from trainsim.predictor import Prediction

#: Exposed-time categories: label and colour (keys of ``Prediction.breakdown_s``).
BREAKDOWN: dict[str, tuple[str, str]] = {
    "compute": ("compute", "#4C72B0"), "tp_comm": ("TP comm", "#DD8452"), "cp_comm": ("CP comm", "#937860"),
    "ep_comm": ("EP comm", "#DA8BC3"), "pp_comm": ("PP comm", "#8172B3"), "dp_comm": ("DP comm", "#C44E52"),
    "pipeline_bubble": ("pipeline bubble", "#CCB974"), "optimizer": ("optimizer", "#55A868"),
    "other": ("other", "#8C8C8C"),
}
MEMORY_PARTS: tuple[tuple[str, str, str], ...] = (
    ("weights_bytes", "weights", "#4C72B0"), ("gradients_bytes", "gradients", "#DD8452"),
    ("optimizer_bytes", "optimizer states", "#55A868"), ("activations_bytes", "activations", "#C44E52"),
    ("other_bytes", "other (context, buffers, fragmentation)", "#8C8C8C"),
)
#: Timeline slices grouped for colour: label, colour, drawn thin (communication).
TIMELINE_GROUPS: tuple[tuple[str, str, bool], ...] = (
    ("forward", "#4C72B0", False), ("backward", "#DD8452", False), ("weight gradient", "#937860", False),
    ("optimizer", "#55A868", False), ("pipeline send/recv", "#8172B3", True), ("DP comm", "#C44E52", True),
    ("grad sync", "#DA8BC3", True), ("TP/CP/EP comm", "#64B5CD", True),
)
#: Largest number of slices embedded in a timeline (about 1.5 MB); beyond it the page shows the first stages.
MAX_TIMELINE_EVENTS = 60_000


def _title(p: Prediction) -> tuple[str, str]:
    j = p.job
    plan = (f"tp {j['tp']} · pp {j['pp']}" + (f" · vpp {j['vpp']}" if j["vpp"] > 1 else "")
            + (f" · cp {j['cp']}" if j["cp"] > 1 else "") + (f" · ep {j['ep']}" if j["ep"] > 1 else "")
            + f" · dp {j['dp']}")
    title = f"{j['model'].get('name', 'model')} on {j['num_gpus']:,}× {j['system']['gpu']['name']}"
    sub = (f"{plan}; micro-batch {j['micro_batch_size']}, global batch {j['global_batch_size']}, sequence "
           f"{j['seq_length']}, {j['precision']}, {j['schedule']} schedule, recompute {j['recompute_granularity']}, "
           f"ZeRO {j['zero_stage']}; {p.engine} engine")
    return title, sub


def _straggler_lines(p: Prediction) -> list[str]:
    st = getattr(p, "stragglers", None)
    if not st:
        return []
    out = []
    for r, f in (st.get("slow_rank") or {}).items():
        out.append(f"GPU rank {r} computes {f:g}× slower")
    for s, f in (st.get("slow_stage") or {}).items():
        out.append(f"every GPU of stage {s} computes {f:g}× slower")
    for n, f in (st.get("slow_link") or {}).items():
        out.append(f"node {n}'s network links deliver 1/{f:g} of their bandwidth")
    if st.get("seq_len_cv"):
        out.append(f"micro-batch sequence lengths vary with CV {st['seq_len_cv']:g} (seed {st.get('seed', 0)})")
    return out


def _breakdown(p: Prediction) -> dict[str, Any]:
    items = [(k, v) for k, v in p.breakdown_s.items() if v > 0]
    t = p.iteration_time_s
    scale, unit = time_unit(t)
    traces = [{"type": "bar", "orientation": "h", "name": BREAKDOWN.get(k, (k, ""))[0], "y": ["iteration"],
               "x": [v / scale], "marker": {"color": BREAKDOWN.get(k, (k, PALETTE[i % len(PALETTE)]))[1]},
               "text": [f"{BREAKDOWN.get(k, (k, ''))[0]} {v / t:.0%}" if v / t >= 0.06 else ""],
               "textposition": "inside", "insidetextanchor": "middle",
               "hovertemplate": f"{BREAKDOWN.get(k, (k, ''))[0]}: {fmt_time(v)} ({v / t:.1%})<extra></extra>"}
              for i, (k, v) in enumerate(items)]
    return {"data": traces, "layout": {"barmode": "stack", "height": 200, "showlegend": True,
                                       "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom",
                                                  "traceorder": "normal"},
                                       "xaxis": {"title": {"text": f"{unit} (exposed time sums to the iteration)"}},
                                       "yaxis": {"visible": False}, "margin": {"l": 20, "r": 20, "t": 40, "b": 50}}}


def _memory(p: Prediction) -> dict[str, Any]:
    stages = p.memory.per_stage
    x = [f"stage {s.stage}" for s in stages]
    traces = [{"type": "bar", "name": label, "x": x, "y": [getattr(s, attr) / 1e9 for s in stages],
               "marker": {"color": color}, "hovertemplate": f"{label}: %{{y:.2f}} GB<extra>%{{x}}</extra>"}
              for attr, label, color in MEMORY_PARTS]
    cap = p.memory.capacity_bytes / 1e9
    top = max(cap, p.memory.peak_bytes / 1e9) * 1.08
    return {"data": traces, "layout": {
        "barmode": "stack", "height": 360, "yaxis": {"title": {"text": "GB per GPU"}, "range": [0, top]},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": cap, "y1": cap,
                    "line": {"color": "#c62828", "dash": "dash", "width": 2}}],
        "annotations": [{"xref": "paper", "x": 1, "y": cap, "yanchor": "bottom", "xanchor": "right",
                         "showarrow": False, "text": f"capacity {cap:.1f} GB", "font": {"color": "#c62828"}}]}}


def _busy_idle(rows: list[dict[str, Any]], t: float) -> dict[str, Any]:
    scale, unit = time_unit(t)
    x = [f"stage {r['stage']}" for r in rows]
    parts = (("compute_s", "compute", "#4C72B0"), ("comm_exposed_s", "exposed comm", "#DD8452"),
             ("pp_wait_s", "waiting for the pipeline", "#8172B3"), ("dp_wait_s", "waiting for DP peers", "#C44E52"),
             ("bubble_s", "bubble", "#CCB974"))
    traces = [{"type": "bar", "name": label, "x": x, "y": [r.get(key, 0.0) / scale for r in rows],
               "marker": {"color": color}, "hovertemplate": f"{label}: %{{y:.4g}} {unit}<extra>%{{x}}</extra>"}
              for key, label, color in parts]
    return {"data": traces, "layout": {"barmode": "stack", "height": 330,
                                       "yaxis": {"title": {"text": unit}},
                                       "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"}}}


def _group(cat: str, name: str) -> int:
    if cat == "compute":
        return {"F": 0, "B": 1, "W": 2}.get(name[:1], 0)
    return {"optimizer": 3, "pp comm": 4, "dp comm": 5, "grad sync": 6}.get(cat, 7)


def timeline_data(tl: Any, budget: int = MAX_TIMELINE_EVENTS) -> dict[str, Any]:
    """Compact slices of the first simulated iteration, one row per (simulated GPU, stream), and the rows of
    GPUs slowed by injected stragglers."""
    from trainsim.engine.chrome import ranges, trace_events
    from trainsim.engine.timeline import STREAM_ID, STREAMS

    events, _, _, _ = trace_events(tl, "block")
    events = events[events["step"] == 0].copy()
    pp_tids = [STREAM_ID[k] for k in STREAMS if k.startswith("pp ")]
    events.loc[events["tid"].isin(pp_tids), "tid"] = pp_tids[0]  # one row for the pipeline transfers of a GPU
    p, job = tl.graph.pp, tl.job
    slow: dict[int, float] = {}
    for cls in range(tl.classes):
        factors = tl.scenario.compute[cls]
        for s in range(p):
            if abs(float(factors[s]) - 1.0) > 1e-12:
                slow[cls * p + s] = float(factors[s])
    slowed_classes = {pid // p for pid in slow}
    # replica classes holding a slowed GPU first, so that the injected straggler is at the top
    keys = sorted({(int(a), int(b)) for a, b in zip(events["pid"], events["tid"], strict=True)},
                  key=lambda k: (k[0] // p not in slowed_classes, k))
    shown_pids = sorted({k[0] for k in keys})
    truncated = False
    if len(events) > budget:  # keep whole GPUs, slowed ones first, until the budget is used
        pids, counts = np.unique(events["pid"].to_numpy(), return_counts=True)
        per_pid = {int(a): int(c) for a, c in zip(pids, counts, strict=True)}
        order = sorted(shown_pids, key=lambda q: (q not in slow, q))
        keep, used = [], 0
        for q in order:
            if used + per_pid.get(q, 0) > budget and keep:
                continue
            keep.append(q)
            used += per_pid.get(q, 0)
        shown_pids = keep
        truncated = True
        events = events[events["pid"].isin(shown_pids)]
        keys = [k for k in keys if k[0] in set(shown_pids)]
    labels = []
    for pid, tid in keys:
        cls, s = divmod(pid, p)
        reps = tl.replicas_of(cls)
        who = "all DP" if len(reps) == job.dp else f"DP {ranges(reps)}"
        mark = f" ⚠×{slow[pid]:g}" if pid in slow else ""
        stream = "pipeline p2p" if tid == pp_tids[0] else STREAMS[tid - 1]
        labels.append(f"st {s} · {who}{mark} · {stream}")
    row_of = {k: i for i, k in enumerate(keys)}
    names = sorted(set(events["name"].astype(str)))
    name_of = {n: i for i, n in enumerate(names)}
    ts = events["ts_s"].to_numpy(float)
    ev = {"r": [row_of[(int(a), int(b))] for a, b in zip(events["pid"], events["tid"], strict=True)],
          "g": [_group(str(c), str(n)) for c, n in zip(events["cat"], events["name"], strict=True)],
          "s": np.rint(ts * 1e6).astype(np.int64).tolist(),
          "d": np.maximum(np.rint(events["dur_s"].to_numpy(float) * 1e6), 1).astype(np.int64).tolist(),
          "n": [name_of[str(n)] for n in events["name"]]}
    slow_rows = [i for i, (pid, _) in enumerate(keys) if pid in slow]
    return {"rows": labels, "names": names, "events": ev, "slow_rows": slow_rows, "truncated": truncated,
            "gpus_shown": len(shown_pids), "gpus_total": tl.classes * p,
            "groups": [list(g) for g in TIMELINE_GROUPS]}


def _memory_over_time(tl: Any, capacity: float) -> dict[str, Any]:
    from trainsim.engine.memory import memory_timeline

    stages = memory_timeline(tl)
    end = max(float(s.times_s[-1]) for s in stages) if stages else 1.0
    scale, unit = time_unit(end)
    traces = []
    many = len(stages) > 10
    for s in stages:
        color = PALETTE[s.stage % len(PALETTE)]
        traces.append({"type": "scatter", "mode": "lines", "name": f"stage {s.stage}",
                       "x": (s.times_s / scale).round(6).tolist(), "y": (s.bytes / 1e9).round(4).tolist(),
                       "line": {"shape": "hv", "width": 1.2 if many else 1.8, "color": color},
                       "hovertemplate": f"stage {s.stage}: %{{y:.2f}} GB at %{{x:.4g}} {unit}<extra></extra>"})
    cap = capacity / 1e9
    return {"data": traces, "layout": {
        "height": 380, "hovermode": "closest", "xaxis": {"title": {"text": f"{unit} from the start of the step"}},
        "yaxis": {"title": {"text": "allocated GB per GPU"}, "rangemode": "tozero"},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": cap, "y1": cap,
                    "line": {"color": "#c62828", "dash": "dash", "width": 2}}],
        "annotations": [{"xref": "paper", "x": 1, "y": cap, "yanchor": "bottom", "xanchor": "right",
                         "showarrow": False, "text": f"capacity {cap:.1f} GB", "font": {"color": "#c62828"}}]}}


_JS = r"""
(function () {
  var D = window.TRAINSIM_DATA.predict;
  if (!D.timeline) { document.body.setAttribute('data-ready', '1'); return; }
  var T = D.timeline;
  var h = D.timeline_height;
  var traces = window.TRAINSIM_SEGMENTS(T.events, {groups: T.groups, rows: T.rows, names: T.names, unit: D.unit,
                                                   unitUs: D.unit_us, plotHeight: h - 110});
  var shapes = T.slow_rows.map(function (i) {
    return {type: 'rect', xref: 'paper', x0: 0, x1: 1, yref: 'y', y0: i - 0.5, y1: i + 0.5,
            fillcolor: 'rgba(198,40,40,0.12)', line: {width: 0}, layer: 'below'};
  });
  var layout = {height: h, hovermode: 'closest', margin: {l: 250, r: 20, t: 30, b: 50}, plot_bgcolor: '#ffffff',
                legend: {orientation: 'h', y: 1.01, yanchor: 'bottom'}, shapes: shapes,
                xaxis: {title: {text: D.unit + ' from the start of the iteration'}, gridcolor: '#e5e7eb'},
                yaxis: {type: 'category', categoryorder: 'array', categoryarray: T.rows,
                        range: [T.rows.length - 0.5, -0.5], tickfont: {size: 9}, automargin: true}};
  Promise.all(Object.values(window.TRAINSIM_FIGS)).then(function () {
    return Plotly.react('timeline', traces, layout, D.config);
  }).then(function () { document.body.setAttribute('data-ready', '1'); });
})();
"""


def predict_page(p: Prediction, *, trace_file: str | None = None) -> Page:
    """Build the prediction page (see the module docstring); ``trace_file``: a Chrome trace written beside it."""
    from trainsim.report.page import PLOTLY_CONFIG

    title, sub = _title(p)
    page = Page(f"Prediction: {title}", sub, kind="predict")
    s = page.section("Summary", anchor="summary")
    stragglers = _straggler_lines(p)
    st = getattr(p, "stragglers", None)
    if stragglers and st:
        s.banner(f"<b>Injected stragglers:</b> {esc('; '.join(stragglers))}. The iteration takes "
                 f"<b>{esc(fmt_time(p.iteration_time_s))}</b> instead of "
                 f"{esc(fmt_time(st['baseline_iteration_time_s']))} without them: "
                 f"<b id=\"straggler-slowdown\">{st['slowdown']:.3f}× slower</b>. Slowed GPUs are shaded in the "
                 "timeline below.", "bad" if st["slowdown"] >= 1.05 else "warn")
    fits = p.memory.fits
    cards: list[tuple[str, str, str] | tuple[str, str, str, str]] = [
        ("iteration time", fmt_time(p.iteration_time_s), f"{p.engine} engine"),
        ("tokens/s", f"{p.tokens_per_s:,.0f}", f"{p.tokens_per_s_per_gpu:,.0f} per GPU"),
        ("MFU / HFU", f"{p.mfu:.1%} / {p.hfu:.1%}", f"{p.model_tflops_per_gpu:.0f} model TFLOP/s per GPU "
         f"({p.flops_convention} FLOPs)"),
    ]
    if p.training is not None:
        tr = p.training
        cards += [("training time", f"{tr.days:,.1f} days", f"{tr.tokens:.3g} tokens, {tr.iterations:,.0f} "
                   "iterations"),
                  ("cost", fmt_money(tr.cost_usd), f"{tr.gpu_hours:,.0f} GPU-hours at ${tr.price_per_gpu_hour:.2f}")]
    else:
        cards.append(("training time", "–", "give --train-tokens for days and $"))
    cards.append(("peak memory", f"{p.memory.peak_bytes / 1e9:.1f} GB",
                  f"of {p.memory.capacity_bytes / 1e9:.1f} GB: {'fits' if fits else 'does NOT fit'}",
                  "good" if fits else "bad"))
    s.cards(cards, id_prefix="sum-")

    b = page.section("Where the time goes", "Exposed time per category: communication hidden behind compute is not "
                     "counted, so the parts sum to the iteration time.", "breakdown")
    b.figure(_breakdown(p), "breakdown", height=200)
    m = page.section("Memory per GPU, by pipeline stage", "Megatron's accounting per stage (the first holds the "
                     "embedding, the last the LM head and the logits), against the GPU's capacity.", "memory")
    m.figure(_memory(p), "memory", height=360)

    tl = p.timeline
    data: dict[str, Any] = {"config": PLOTLY_CONFIG, "timeline": None}
    if tl is not None:
        t_data = timeline_data(tl)
        n = len(t_data["rows"])
        height = int(min(max(320, 13 * n + 140), 2400))
        scale, unit = time_unit(float(np.mean(tl.step_times())))
        intro = ("One iteration, one row per stream of every simulated GPU (a pipeline stage of a replica class: "
                 "identical data-parallel replicas are simulated once). Drag to zoom, double-click to reset; hover "
                 "for the operation.")
        if t_data["truncated"]:
            intro += (f" Showing {t_data['gpus_shown']} of {t_data['gpus_total']} simulated GPUs (slowed ones first) "
                      "to keep the page small; write --trace FILE for all of them.")
        sec = page.section("Per-GPU stream timelines", intro, "timeline")
        if trace_file:
            sec.html(f'<p class="note">Chrome/Perfetto trace of the same run: <a href="{esc(trace_file)}">'
                     f"{esc(trace_file)}</a></p>")
        sec.figure({"data": [], "layout": {"height": height}}, "timeline", height=height)
        data.update(timeline=t_data, timeline_height=height, unit=unit, unit_us=scale * 1e6)
        page.section("Memory over time", "Allocated memory on one GPU of each stage over the step (the replica "
                     "class and step with the highest peak), from the lifetimes of activations in the schedule.",
                     "memory-time").figure(_memory_over_time(tl, p.memory.capacity_bytes), "memory-time", height=380)
    rows = getattr(p, "stage_busy_idle", None)
    if rows:
        page.section("Busy and idle per stage (critical replica)", "Where each stage's time goes in the event "
                     "engine: computing, exposed communication, or waiting.", "busy").figure(
            _busy_idle(rows, p.iteration_time_s), "busy-idle", height=330)
    details = page.section("Configuration", anchor="config")
    j = p.job
    details.bullets([
        f"model: {j['model'].get('name', '?')}, {j['num_params'] / 1e9:,.1f} B parameters, "
        f"{j['model'].get('num_layers')} layers, hidden {j['model'].get('hidden_size')}",
        f"system: {j['system'].get('name', '?')}, {j['num_nodes']} nodes, {j['system']['gpu']['name']}",
        f"layers per stage: {', '.join(str(x) for x in j['layers_per_stage'])}; {j['num_microbatches']} micro-batches "
        "per iteration",
        f"pipeline bubble with uniform stages: {fmt_pct(p.bubble_fraction)}",
    ])
    page.embed("predict", data)
    page.script(_JS)
    page.defer_ready = True
    return page


def write_predict_report(p: Prediction, path: str | os.PathLike[str], **options: Any) -> Path:
    """Write the prediction page to ``path`` (atomically); ``options`` go to :func:`predict_page`."""
    return predict_page(p, **options).write(path)
