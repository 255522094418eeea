"""The shared builder of self-contained HTML report pages.

A :class:`Page` is a list of sections holding metric cards, plotly figures, tables, notes and small scripts. It
renders to **one** HTML file: plotly.js (the bundle shipped with the ``plotly`` Python package) is inlined once, the
figures travel as inline JSON, the style sheet and the page scripts are inline too. Nothing is fetched: no CDN, no
web font, no MathJax (``typesetMath`` off, no MathJax bundle), no topojson (no geo traces); the file opens from
``file://`` on a machine without network. Each page module (``whatif``, ``predict``, ``search``, ``plan``,
``cluster``) builds a :class:`Page` and calls :meth:`Page.write`.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.io.atomic import write_text_atomic

#: Plotly configuration of every figure: no logo, no cloud links, no math typesetting (it would need MathJax).
PLOTLY_CONFIG: dict[str, Any] = {
    "displaylogo": False,
    "responsive": True,
    "showLink": False,
    "showSendToCloud": False,
    "showEditInChartStudio": False,
    "typesetMath": False,
    "modeBarButtonsToRemove": ["select2d", "lasso2d"],
}

#: Colours shared by every page (a qualitative palette and the semantic ones).
PALETTE: tuple[str, ...] = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C",
                            "#CCB974", "#64B5CD")
GOOD, BAD, WARN, MUTED = "#2e7d32", "#c62828", "#ef6c00", "#6b7280"
#: Sequential white-to-red scale for slowdowns (ColorBrewer Reds, as the PNG heatmap).
REDS: list[list[Any]] = [[i / 8, c] for i, c in enumerate(
    ("#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#a50f15", "#67000d"))]

_CSS = """
:root { --fg:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f8fafc; --card:#ffffff; --accent:#1f4e99; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color:var(--fg);
       background:var(--bg); }
header { background:#0f172a; color:#f8fafc; padding:18px 28px 14px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:600; }
header .sub { color:#cbd5e1; font-size:13px; }
main { max-width:1280px; margin:0 auto; padding:8px 24px 40px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; margin:16px 0; padding:14px 18px; }
section h2 { margin:0 0 8px; font-size:17px; font-weight:600; }
section p.intro { margin:0 0 10px; color:var(--muted); }
.cards { display:flex; flex-wrap:wrap; gap:10px; }
.card { flex:1 1 150px; min-width:150px; border:1px solid var(--line); border-radius:6px; padding:8px 12px;
        background:#fbfdff; }
.card .label { color:var(--muted); font-size:12px; }
.card .value { font-size:21px; font-weight:600; white-space:nowrap; }
.card .note { color:var(--muted); font-size:11.5px; }
.card.good .value { color:#2e7d32; } .card.bad .value { color:#c62828; } .card.warn .value { color:#ef6c00; }
.banner { border-radius:6px; padding:10px 14px; margin:0 0 12px; font-size:15px; border-left:6px solid var(--accent);
          background:#eef2ff; }
.banner.bad { border-color:#c62828; background:#fdecea; } .banner.good { border-color:#2e7d32; background:#e8f5e9; }
.banner.warn { border-color:#ef6c00; background:#fff4e5; }
.banner b { font-size:16px; }
.note { color:var(--muted); font-size:12.5px; }
ul.hints { margin:4px 0 0 18px; padding:0; } ul.hints li { margin:3px 0; }
.row { display:flex; flex-wrap:wrap; gap:16px; } .row > .col { flex:1 1 420px; min-width:0; }
.fig { width:100%; }
table.data { border-collapse:collapse; width:100%; font-size:12.5px; }
table.data th, table.data td { border-bottom:1px solid var(--line); padding:4px 8px; text-align:right;
                               white-space:nowrap; }
table.data th { background:#f1f5f9; position:sticky; top:0; cursor:pointer; user-select:none; }
table.data th.sorted-asc::after { content:" ▲"; font-size:10px; } table.data th.sorted-desc::after { content:" ▼";
  font-size:10px; }
table.data td.text, table.data th.text { text-align:left; }
table.data tr.hl td { background:#fff8e1; font-weight:600; }
.tablewrap { max-height:520px; overflow:auto; border:1px solid var(--line); border-radius:6px; }
select, button { font:inherit; padding:3px 6px; }
code { background:#f1f5f9; padding:1px 4px; border-radius:3px; font-size:12.5px; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:12px; }
"""

#: Sortable tables: click a header to sort by it (numbers by their ``data-v`` value).
_TABLE_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var heads = table.querySelectorAll('th');
  heads.forEach(function (th, col) {
    th.addEventListener('click', function () {
      var asc = !th.classList.contains('sorted-asc');
      heads.forEach(function (h) { h.classList.remove('sorted-asc', 'sorted-desc'); });
      th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-v'), y = b.cells[col].getAttribute('data-v');
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        if (isNaN(nx) !== isNaN(ny)) { c = isNaN(nx) ? 1 : -1; return c; }
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""

#: Timelines built in the browser from compact slices (``{r: rows, g: groups, s: starts µs, d: durations µs,
#: n: name indices}``): one line-segment trace per group, hover text per slice.
_SEGMENTS_JS = """
window.TRAINSIM_SEGMENTS = function (ev, o) {
  var G = o.groups, R = o.rows, traces = [];
  var width = Math.max(1.5, Math.min(18, 0.7 * o.plotHeight / Math.max(R.length, 1)));
  for (var g = 0; g < G.length; g++) {
    var x = [], y = [], t = [];
    for (var k = 0; k < ev.r.length; k++) {
      if (ev.g[k] !== g) continue;
      var s = ev.s[k] / o.unitUs, e = (ev.s[k] + ev.d[k]) / o.unitUs, row = R[ev.r[k]];
      var label = (ev.n && o.names) ? o.names[ev.n[k]] : G[g][0];
      var txt = label + '<br>' + row + '<br>' + s.toFixed(4) + ' → ' + e.toFixed(4) + ' ' + o.unit + ' (' +
        (ev.d[k] / 1000).toFixed(3) + ' ms)';
      x.push(s, (s + e) / 2, e, null); y.push(row, row, row, null); t.push(txt, txt, txt, null);
    }
    if (!x.length) continue;
    traces.push({type: 'scatter', mode: 'lines', x: x, y: y, hovertext: t, hoverinfo: 'text', name: G[g][0],
                 legendgroup: G[g][0], showlegend: o.showlegend !== false, xaxis: o.xaxis || 'x',
                 yaxis: o.yaxis || 'y', line: {color: G[g][1], width: width * (G[g][2] ? 0.45 : 1)}});
  }
  return traces;
};
"""

#: Draw every figure from its inline JSON.
_FIGURES_JS = """
window.TRAINSIM_FIGS = {};
document.querySelectorAll('script.fig-data').forEach(function (el) {
  var spec = JSON.parse(el.textContent);
  var div = document.getElementById(el.getAttribute('data-target'));
  window.TRAINSIM_FIGS[div.id] = Plotly.newPlot(div, spec.data, spec.layout, spec.config);
});
Promise.all(Object.values(window.TRAINSIM_FIGS)).then(function () {
  if (!window.TRAINSIM_DEFER_READY) { document.body.setAttribute('data-ready', '1'); }
});
"""


def esc(text: object) -> str:
    """HTML-escape any value."""
    return html.escape(str(text), quote=True)


def _script_json(obj: Any) -> str:
    """JSON safe inside a ``<script>`` element."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"), default=_default)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def clean(value: Any) -> Any:
    """Replace non-finite floats (NaN, inf) by ``None`` recursively, so that JSON stays valid."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if hasattr(value, "tolist"):
        return clean(value.tolist())
    return value


def plotly_js() -> str:
    """The plotly.js bundle of the installed ``plotly`` package (inlined once per page)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


@dataclass
class Cell:
    """A table cell: shown text, sort value and CSS class."""

    text: str
    sort: Any = None
    cls: str = ""


def num(value: float | int | None, fmt: str = "{:,.3g}", missing: str = "–") -> Cell:
    """A numeric cell formatted with ``fmt`` and sorted by the value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Cell(missing, None)
    return Cell(fmt.format(value), value)


def text(value: object) -> Cell:
    """A left-aligned text cell."""
    return Cell(str(value), str(value), "text")


@dataclass
class Section:
    """One titled block of a page; its parts render in order."""

    title: str
    intro: str = ""
    anchor: str = ""
    parts: list[str] = field(default_factory=list)

    def html(self, raw: str) -> Section:
        """Append raw HTML (the caller escapes what it interpolates)."""
        self.parts.append(raw)
        return self

    def paragraph(self, content: str, cls: str = "note") -> Section:
        """Append a paragraph of escaped text."""
        self.parts.append(f'<p class="{cls}">{esc(content)}</p>')
        return self

    def banner(self, content_html: str, tone: str = "") -> Section:
        """Append a coloured banner (``tone``: good, bad, warn or neutral)."""
        self.parts.append(f'<div class="banner {esc(tone)}">{content_html}</div>')
        return self

    def cards(self, cards: Iterable[tuple[str, str, str] | tuple[str, str, str, str]], id_prefix: str = "") -> Section:
        """Append metric cards ``(label, value, note[, tone])``; each value gets ``id="<prefix>card-<n>"``."""
        out = ['<div class="cards">']
        for n, card in enumerate(cards):
            label, value, note = card[0], card[1], card[2]
            tone = card[3] if len(card) > 3 else ""  # type: ignore[misc]
            ident = f' id="{esc(id_prefix)}card-{n}"' if id_prefix else ""
            out.append(f'<div class="card {esc(tone)}"><div class="label">{esc(label)}</div>'
                       f'<div class="value"{ident}>{esc(value)}</div><div class="note">{esc(note)}</div></div>')
        out.append("</div>")
        self.parts.append("".join(out))
        return self

    def bullets(self, items: Iterable[str], cls: str = "hints", ident: str = "") -> Section:
        """Append a bullet list of escaped text."""
        id_attr = f' id="{esc(ident)}"' if ident else ""
        self.parts.append(f'<ul class="{esc(cls)}"{id_attr}>' + "".join(f"<li>{esc(i)}</li>" for i in items)
                          + "</ul>")
        return self

    def figure(self, fig: Any, ident: str, height: int = 420) -> Section:
        """Append a plotly figure (a ``plotly.graph_objects.Figure`` or a ``{"data", "layout"}`` dict)."""
        self.parts.append(figure_html(fig, ident, height))
        return self

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[Cell]], ident: str, sortable: bool = True,
              highlight: Iterable[int] = (), text_columns: Iterable[int] = ()) -> Section:
        """Append a table; ``highlight``: row positions to emphasise; sortable by clicking a header."""
        self.parts.append(table_html(columns, rows, ident, sortable, highlight, text_columns))
        return self


def figure_html(fig: Any, ident: str, height: int = 420) -> str:
    """A ``<div>`` and the inline JSON that draws a plotly figure into it."""
    spec = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else dict(fig)
    layout = dict(spec.get("layout") or {})
    layout.setdefault("height", height)
    layout.setdefault("margin", {"l": 60, "r": 20, "t": 40, "b": 50})
    layout.setdefault("font", {"family": "-apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif",
                               "size": 12})
    layout.setdefault("template", None)
    if layout.get("template") is None:
        layout.pop("template")
        layout.setdefault("plot_bgcolor", "#ffffff")
        layout.setdefault("paper_bgcolor", "#ffffff")
        layout.setdefault("colorway", list(PALETTE))
        for axis in [k for k in layout if k.startswith(("xaxis", "yaxis"))] or ["xaxis", "yaxis"]:
            ax = dict(layout.get(axis) or {})
            ax.setdefault("gridcolor", "#e5e7eb")
            ax.setdefault("zerolinecolor", "#cbd5e1")
            ax.setdefault("linecolor", "#94a3b8")
            layout[axis] = ax
    data = {"data": clean(list(spec.get("data") or [])), "layout": clean(layout), "config": PLOTLY_CONFIG}
    return (f'<div class="fig" id="{esc(ident)}" style="height:{int(height)}px"></div>'
            f'<script type="application/json" class="fig-data" data-target="{esc(ident)}">{_script_json(data)}'
            "</script>")


def table_html(columns: Sequence[str], rows: Iterable[Sequence[Cell]], ident: str, sortable: bool = True,
               highlight: Iterable[int] = (), text_columns: Iterable[int] = ()) -> str:
    """A (sortable) HTML table of :class:`Cell` rows."""
    text_cols = set(text_columns)
    hl = set(highlight)
    cls = "data sortable" if sortable else "data"
    head = "".join(f'<th class="{"text" if i in text_cols else ""}">{esc(c)}</th>' for i, c in enumerate(columns))
    body = []
    for r, row in enumerate(rows):
        cells = []
        for i, c in enumerate(row):
            k = c.cls or ("text" if i in text_cols else "")
            sort = "" if c.sort is None else esc(c.sort)
            cells.append(f'<td class="{k}" data-v="{sort}">{esc(c.text)}</td>')
        row_cls = ' class="hl"' if r in hl else ""
        body.append(f"<tr{row_cls}>" + "".join(cells) + "</tr>")
    return (f'<div class="tablewrap"><table class="{cls}" id="{esc(ident)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


class Page:
    """A self-contained HTML report page (see the module docstring)."""

    def __init__(self, title: str, subtitle: str = "", kind: str = "report") -> None:
        self.title = title
        self.subtitle = subtitle
        self.kind = kind
        self.sections: list[Section] = []
        self.scripts: list[str] = []
        self.data: dict[str, Any] = {}
        #: A page script sets ``data-ready`` on the body itself (after drawing what it draws).
        self.defer_ready = False

    def section(self, title: str, intro: str = "", anchor: str = "") -> Section:
        """Add and return a new section."""
        s = Section(title, intro, anchor)
        self.sections.append(s)
        return s

    def script(self, js: str) -> None:
        """Add page JavaScript, run after the figures are drawn."""
        self.scripts.append(js)

    def embed(self, name: str, value: Any) -> None:
        """Embed a JSON datum for the page scripts, read as ``TRAINSIM_DATA[name]``."""
        self.data[name] = clean(value)

    def render(self) -> str:
        """The whole page as one HTML string."""
        from trainsim import __version__

        body = []
        for s in self.sections:
            anchor = f' id="sec-{esc(s.anchor)}"' if s.anchor else ""
            intro = f'<p class="intro">{esc(s.intro)}</p>' if s.intro else ""
            body.append(f"<section{anchor}><h2>{esc(s.title)}</h2>{intro}{''.join(s.parts)}</section>")
        data = f"window.TRAINSIM_DATA = {_script_json(self.data)};"
        if self.defer_ready:
            data += "window.TRAINSIM_DEFER_READY = true;"
        return "\n".join([
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="trainsim {esc(__version__)}">',
            f'<meta name="trainsim-report" content="{esc(self.kind)}">',
            f"<title>{esc(self.title)}</title>",
            f"<style>{_CSS}</style>",
            f"<script>{plotly_js()}</script>",
            "</head><body>",
            f'<header><h1>{esc(self.title)}</h1><div class="sub">{esc(self.subtitle)}</div></header>',
            "<main>", *body, "</main>",
            f"<footer>trainsim {esc(__version__)} · {esc(self.kind)} report · self-contained "
            "(no network needed)</footer>",
            f"<script>{data}</script>",
            f"<script>{_SEGMENTS_JS}{_FIGURES_JS}{_TABLE_JS}</script>",
            *(f"<script>{js}</script>" for js in self.scripts),
            "</body></html>",
        ])

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the page atomically; return its path."""
        p = Path(path)
        write_text_atomic(p, self.render())
        return p


def fmt_money(x: float | None) -> str:
    """Dollars in a readable unit ($1.23M)."""
    if x is None or not math.isfinite(x):
        return "–"
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"${x / scale:,.2f}{unit}"
    return f"${x:,.2f}"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage."""
    if x is None or not math.isfinite(x):
        return "–"
    if abs(x * 100) < 0.5 * 10 ** -digits:
        x = 0.0  # no "-0 %"
    return f"{x * 100:.{digits}f} %"


def fmt_time(s: float | None) -> str:
    """Seconds in a readable unit (the CLI's formatting)."""
    from trainsim.units import fmt_seconds

    return "–" if s is None or not math.isfinite(s) else fmt_seconds(s)


def time_unit(max_seconds: float) -> tuple[float, str]:
    """A divisor and unit name for an axis spanning up to ``max_seconds``."""
    if max_seconds >= 2 * 86400:
        return 86400.0, "days"
    if max_seconds >= 2 * 3600:
        return 3600.0, "hours"
    if max_seconds >= 120:
        return 60.0, "minutes"
    if max_seconds >= 2:
        return 1.0, "s"
    return 1e-3, "ms"


def segment_trace(name: str, starts: Sequence[float], ends: Sequence[float], rows: Sequence[Any],
                  hover: Sequence[str], color: str, width: float, showlegend: bool = True) -> dict[str, Any]:
    """One plotly trace drawing horizontal bars ``[start, end]`` on categorical ``rows`` as thick line segments.

    One SVG path per trace (instead of one element per bar) keeps pages with tens of thousands of bars fast; the
    hover text is attached to the start, middle and end of every bar.
    """
    xs: list[float | None] = []
    ys: list[Any] = []
    texts: list[str | None] = []
    for s, e, r, h in zip(starts, ends, rows, hover, strict=True):
        xs += [float(s), (float(s) + float(e)) / 2.0, float(e), None]
        ys += [r, r, r, None]
        texts += [h, h, h, None]
    return {"type": "scatter", "mode": "lines", "name": name, "x": xs, "y": ys, "hovertext": texts,
            "hoverinfo": "text", "line": {"color": color, "width": width}, "connectgaps": False,
            "showlegend": showlegend}


def bar_width(rows: int, height: int) -> float:
    """Line width (px) of a segment bar so that ``rows`` rows fill ``height`` pixels with small gaps."""
    plot = max(height - 90, 50)
    return float(min(max(0.7 * plot / max(rows, 1), 1.5), 22.0))
