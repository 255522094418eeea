"""``trainsim cluster curves``: the iteration-time curve of one job over GPU counts, as a table, JSON or CSV."""

from __future__ import annotations

import io
import json
import math
from typing import Any

from trainsim.cluster.spec import Pool
from trainsim.cluster.throughput import ThroughputModel, pow2_sizes
from trainsim.cluster.trace import JobSpec
from trainsim.errors import TrainsimError


def parse_gpus(text: str) -> list[int]:
    """``N`` → 1, 2, 4 … N; ``N:M`` → powers of two from N to M (and N, M themselves)."""
    try:
        if ":" in text:
            a, b = (int(x) for x in text.split(":", 1))
        else:
            a, b = 1, int(text)
    except ValueError:
        raise TrainsimError("--gpus", f"cannot read {text!r}", "give N or N:M, e.g. 1024 or 8:1024") from None
    if a < 1 or b < a:
        raise TrainsimError("--gpus", f"bad range {text!r}", "give 1 ≤ N ≤ M")
    return sorted({n for n in pow2_sizes(b) if n >= a} | {a, b})


def curve_records(model: str, system: str, gbs: int, gpus: str, seq_length: int | None, source: str,
                  space: str, framework: str | None = None) -> list[dict[str, Any]]:
    """One record per GPU count: ``num_gpus, iteration_time_s, plan, fits`` (and tp, pp, dp, mfu), for the software
    stack ``framework`` (default: trainsim's)."""
    if source not in ("best", "dp-only"):
        raise TrainsimError("--source", f"unknown source {source!r}", "use best or dp-only")
    if gbs <= 0:
        raise TrainsimError("--gbs", "must be positive", "give the global batch in sequences")
    sizes = parse_gpus(gpus)
    from trainsim.spec.presets import load_system

    gpn = load_system(system).node.gpus_per_node
    pool = Pool(name=system, system=system, nodes=max(1, math.ceil(sizes[-1] / gpn)))
    tm = ThroughputModel.parse(source, space, framework)
    tm.model(model)
    job = JobSpec(0, "curve", 0.0, model, gbs, seq_length, 1, None, sizes[0], None, None, 1.0, "default", None, None)
    unit = tm.unit(job, pool)
    if unit > 1:  # dp-only runs on multiples of its tensor × pipeline unit: show those too
        sizes = sorted(set(sizes) | {unit * k for k in pow2_sizes(sizes[-1] // unit) if unit * k >= sizes[0]})
    out = []
    for n in sizes:
        p = tm.point(job, pool, n)
        out.append({"num_gpus": n, "iteration_time_s": None if p is None else p.iteration_time_s,
                    "plan": None if p is None else p.plan, "fits": p is not None,
                    "tp": None if p is None else p.tp, "pp": None if p is None else p.pp,
                    "dp": None if p is None else p.dp, "mfu": None if p is None else p.mfu})
    return out


def format_curve(recs: list[dict[str, Any]], fmt: str, model: str, gbs: int) -> str:
    """``table``, ``json`` (``{"curve": [...]}``), ``csv`` (readable by ``--throughput table:DIR``) or
    ``elasticflow`` (ElasticFlow's throughput profile: ``num_gpus,throughput`` in iterations per second)."""
    if fmt == "json":
        return json.dumps({"curve": recs}, indent=2) + "\n"
    buf = io.StringIO()
    if fmt == "csv":
        buf.write("model,global_batch_size,num_gpus,iteration_time_s,tp,pp,dp,fits\n")
        for r in recs:
            t = "" if r["iteration_time_s"] is None else repr(r["iteration_time_s"])
            buf.write(f"{model},{gbs},{r['num_gpus']},{t},{r['tp'] or ''},{r['pp'] or ''},{r['dp'] or ''},"
                      f"{r['fits']}\n")
        return buf.getvalue()
    if fmt == "elasticflow":
        buf.write("num_gpus,throughput\n")
        for r in recs:
            thr = 0.0 if r["iteration_time_s"] is None else 1.0 / r["iteration_time_s"]
            buf.write(f"{r['num_gpus']},{thr!r}\n")
        return buf.getvalue()
    if fmt != "table":
        raise TrainsimError("--format", f"unknown format {fmt!r}", "use table, json, csv or elasticflow")
    buf.write(f"{'GPUs':>6}  {'iteration':>12}  {'plan':<14} {'MFU':>6}\n")
    for r in recs:
        if r["fits"]:
            buf.write(f"{r['num_gpus']:>6}  {r['iteration_time_s']:>10.3f} s  {r['plan']:<14} "
                      f"{100 * r['mfu']:>5.1f}%\n")
        else:
            buf.write(f"{r['num_gpus']:>6}  {'does not fit':>12}\n")
    return buf.getvalue()
