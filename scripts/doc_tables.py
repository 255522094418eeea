"""Print the tables and numbers that README.md and the docs show, computed by the code as it is now.

Run from the repository root (``PYTHONPATH=src`` in a development checkout):

    python scripts/doc_tables.py search-mtnlg     # docs/search.md, case study 1 (MT-NLG 530B, vTrain §V-A)
    python scripts/doc_tables.py search-nvlink    # docs/search.md, case study 2 (GPT-3 1T on B200, NVLink domains)
    python scripts/doc_tables.py search-plan      # docs/search.md, `plan` (3,360 A100 × 30 days, vTrain Table III)
    python scripts/doc_tables.py profiling-h100   # docs/profiling.md, the H100 tables (needs ../shared/data/gpu-h100)
    python scripts/doc_tables.py readme-validation  # README.md, the accuracy table (as `trainsim validate`)
    python scripts/doc_tables.py meta-llama3      # docs/model.md, Llama 3 405B as Meta ran it (vpp 1/2/4/8)
    python scripts/doc_tables.py model-profiles   # docs/model.md, the framework-profile tables
    python scripts/doc_tables.py all

Each section prints markdown tables followed by the numbers the surrounding prose quotes. Nothing here is fitted or
tuned: every number is a prediction of the current code (or, for the H100 section, a measurement from the shared
data beside its prediction). The docs say which command printed them; rerun it after changing the model and update
the page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _shared() -> Path:
    env = os.environ.get("TRAINSIM_SHARED")
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared"]:
        if (candidate / "data").is_dir():
            return candidate
    sys.exit("error: ../shared (the shared data) is not beside the repository (or set TRAINSIM_SHARED)")


# ---- docs/search.md, case study 1 -----------------------------------------------------------------------------------
MTNLG_PLANS = ((8, 8, 35), (8, 10, 35), (8, 12, 35))
VTRAIN_PLANS = ((8, 12, 21), (8, 15, 21), (8, 24, 15))


def _row(label: str, c: Any) -> str:
    fits = "yes" if c.fits else "**no**"
    time_s = f"{c.iteration_time_s:.1f}" if c.iteration_time_s else "–"
    mfu = f"{c.mfu:.1%}" if c.mfu else "–"
    days = f"{c.training_days:.1f}" if c.training_days else "–"
    cost = f"{c.cost_usd / 1e6:.2f}" if c.cost_usd else "–"
    return (f"| {label} | ({c.tp}, {c.dp}, {c.pp}) | {c.num_gpus:,} | {time_s} | {mfu} | {days} | {cost} | "
            f"{c.peak_memory_bytes / 1e9:.1f} ({fits}) |")


def _share(c: Any, key: str) -> float:
    total = sum(c.breakdown_s.values())
    return c.breakdown_s.get(key, 0.0) / total if total else 0.0


def search_mtnlg() -> None:
    """The two MT-NLG tables (ZeRO 0 and ZeRO-1) and the numbers of the analysis below them."""
    from trainsim.search import SearchSpace, pareto_front, search
    from trainsim.spec import Training

    head = ("| plan | (t, d, p) | GPUs | iteration (s) | MFU | days | cost ($M) | peak GB (fits 80 GiB) |\n"
            "|---|---|---:|---:|---:|---:|---:|---|")
    for zero, title in ((0, "No distributed optimizer (ZeRO 0)"),
                        (1, "Distributed optimizer (ZeRO-1, `--zero-stage 1`)")):
        r = search(SearchSpace(model="mt-nlg-530b", system="dgx-a100", tp="4,8,16",
                               dp="1,2,3,4,5,6,8,10,12,15,16,20,24,30", pp="3,5,7,15,21,35,105", zero_stage=zero,
                               others="default",
                               training=Training(global_batch_size=1920, seq_length=2048,
                                                 recompute_granularity="full", train_tokens=270e9)),
                   objective="cost", include_unfit=True, workers=1)
        by = {(c.tp, c.dp, c.pp): c for c in r.candidates}
        print(f"\n#### {title}\n")
        print(head)
        for key in MTNLG_PLANS:
            print(_row("MT-NLG", by[key]))
        for key in VTRAIN_PLANS:
            print(_row("vTrain", by[key]))
        for ref in (2240, 2800, 3360):
            lo, hi = int(ref * 0.9), int(ref * 1.1)
            near = [c for c in r.candidates if lo <= c.num_gpus <= hi and c.fits]
            cheapest = min(near, key=lambda c: (c.cost_usd, c.index))
            fastest = min(near, key=lambda c: (c.training_days, c.index))
            print(_row(f"search: cheapest, {lo:,}–{hi:,} GPUs", cheapest))
            print(_row(f"search: fastest, {lo:,}–{hi:,} GPUs", fastest))
        fitting = [c for c in r.candidates if c.fits]
        print(_row("search: cheapest overall", min(fitting, key=lambda c: (c.cost_usd, c.index))))
        s = r.summary()
        front = pareto_front(r.candidates)
        print(f"\nvalid {s.get('valid')}, fitting {len(fitting)}, Pareto front {len(r.pareto_candidates())} plans "
              f"({len(front)} among the plans that fit), warnings: {r.warnings}")
        for m, v in zip(MTNLG_PLANS, VTRAIN_PLANS, strict=True):
            a, b = by[m], by[v]
            print(f"vTrain {v} vs MT-NLG {m}: cost {b.cost_usd / a.cost_usd - 1:+.1%}; pipeline bubble "
                  f"{_share(a, 'pipeline_bubble'):.1%} vs {_share(b, 'pipeline_bubble'):.1%}")
        shares = {k: [_share(by[p], k) for p in MTNLG_PLANS + VTRAIN_PLANS]
                  for k in ("compute", "tp_comm", "dp_comm", "pp_comm")}
        print("shares over these six plans: " + ", ".join(f"{k} {min(v):.1%}–{max(v):.1%}" for k, v in shares.items()))
        a = by[MTNLG_PLANS[0]]
        hw = a.hfu * 312e12 / 1e12 if a.hfu else float("nan")
        print(f"MT-NLG (8, 8, 35): {a.iteration_time_s:.1f} s per iteration, HFU {a.hfu:.1%} = {hw:.0f} TFLOP/s per "
              "GPU (A100 BF16 peak 312)")


# ---- docs/search.md, case study 2 -----------------------------------------------------------------------------------
def search_nvlink(domains: tuple[int, ...] = (4, 8, 72),
                  gpus: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)) -> None:
    """GPT-3 1T on B200 with NVLink domains of 4, 8 and 72: the best plan per GPU count, and why."""
    from trainsim.search import SearchSpace, search
    from trainsim.spec import Training, load_system

    print("\n| NVLink domain | GPUs | best (tp, pp, vpp, dp) | mbs | recompute | rank order | iteration (s) | MFU | "
          "days (450B tokens) |\n|---:|---:|---|---:|---|---|---:|---:|---:|")
    base = load_system("dgx-b200")
    notes: list[str] = []
    for gpn in domains:
        system = base.replace(node=base.node.replace(gpus_per_node=gpn),
                              network=base.network.replace(nics_per_node=gpn))
        for n in gpus:
            r = search(SearchSpace(model="gpt3-1t", system=system, num_gpus=n, cp=1, vpp="1,2,4",
                                   micro_batch_size="1,2", zero_stage=1, sequence_parallel=True,
                                   training=Training(global_batch_size=3072, train_tokens=450e9)),
                       objective="training-time")
            c = r.best
            print(f"| {gpn} | {n:,} | ({c.tp}, {c.pp}, {c.vpp}, {c.dp}) | {c.micro_batch_size} | {c.recompute} | "
                  f"{c.rank_order} | {c.iteration_time_s:.2f} | {c.mfu:.1%} | {c.training_days:.1f} |", flush=True)
            other = [x for x in r.top(0) if x.rank_order != c.rank_order]
            alt = (f"; best with another rank order ({other[0].rank_order}): "
                   f"{other[0].iteration_time_s / c.iteration_time_s - 1:+.0%}") if other else ""
            notes.append(f"domain {gpn}, {n:,} GPUs: dp share {_share(c, 'dp_comm'):.0%}, "
                         f"tp {_share(c, 'tp_comm'):.0%}, bubble {_share(c, 'pipeline_bubble'):.0%}, "
                         f"compute {_share(c, 'compute'):.0%}{alt}")
    print()
    print("\n".join(notes))


# ---- docs/search.md, plan -------------------------------------------------------------------------------------------
def search_plan() -> None:
    """``trainsim plan -s dgx-a100 -n 3360 --days 30`` with the plan defaults and with MT-NLG-era settings."""
    from trainsim.plan import plan

    print("\n| setting | point | params | tokens | shape (L × h) | plan (t, p, d), mbs, recompute | MFU | days |\n"
          "|---|---|---:|---:|---|---|---:|---:|")
    for label, dims in (("plan defaults (SP, distributed optimizer, recompute searched)", None),
                        ("MT-NLG-era: full recompute, no SP, no distributed optimizer, mbs 1",
                         {"recompute": "full", "sequence_parallel": False, "zero_stage": 0,
                          "micro_batch_size": 1})):
        d = plan("dgx-a100", 3360, days=30, dims=dims).to_json_dict()
        for point in ("naive", "optimal"):
            p = d[point]
            shape = p.get("shape") or {"layers": p.get("layers"), "hidden_size": p.get("hidden_size")}
            q = p["plan"]
            print(f"| {label} | {'realistic' if point == 'optimal' else point} | {p['params'] / 1e9:.1f}B | "
                  f"{p['tokens'] / 1e12:.2f}T | {shape['layers']} × {shape['hidden_size']} | ({q['tp']}, {q['pp']}, "
                  f"{q['dp']}), {q['micro_batch_size']}, {q['recompute']} | {p['mfu']:.1%} | {p['days']:.1f} |")
        print(f"search: {json.dumps(d.get('search', {}), default=str)[:400]}")


# ---- docs/profiling.md, H100 ----------------------------------------------------------------------------------------
def profiling_h100() -> None:
    """Measured single-H100 steps against ``predict`` with their own operator tables and with the default kernels."""
    import pandas as pd

    from trainsim.cost.tables import measured_cost_model
    from trainsim.predictor import predict
    from trainsim.validation.h100 import run_of

    data = _shared() / "data" / "gpu-h100"
    rows = [json.loads(line) for line in (data / "measured.jsonl").read_text().splitlines() if line.strip()]
    print("\n| run | framework | mbs × micro-batches | recompute | measured step | `--op-costs` its table | error | "
          "measured share | default (H100 kernel surface) | error |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    errs: dict[str, list[float]] = {"table": [], "default": []}
    for r in rows:
        if "iter_s" not in r:
            continue
        job = run_of(r).job
        measured = float(r["iter_s"])
        table = data / r["profile_table"]
        p_tab = predict(job, cost_model=measured_cost_model(job, op_tables=[table]))
        p_def = predict(job)
        e_tab = p_tab.iteration_time_s / measured - 1
        e_def = p_def.iteration_time_s / measured - 1
        errs["table"].append(abs(e_tab))
        errs["default"].append(abs(e_def))
        share = getattr(p_tab, "measured_compute_fraction", None)
        print(f"| {r['name']} | {r['framework']} | {r['mbs']} × {r['num_microbatches']} | "
              f"{'full' if r['recompute'] else 'none'} | {measured * 1e3:,.0f} ms | "
              f"{p_tab.iteration_time_s * 1e3:,.0f} ms | "
              f"{e_tab:+.1%} | {share:.0%} | {p_def.iteration_time_s * 1e3:,.0f} ms | {e_def:+.1%} |")
    for k, v in errs.items():
        print(f"{k}: MAPE {sum(v) / len(v):.1%}, max {max(v):.1%} over {len(v)} runs")

    print("\n| sweep | GEMMs | best GEMM TFLOP/s (shape) | median TFLOP/s, m = n = k ≥ 4096 | attention calls | "
          "best attention TFLOP/s |\n|---|---:|---|---:|---:|---:|")
    for name in ("h100-sweep-bf16.parquet", "h100-sweep-fp8.parquet"):
        t = pd.read_parquet(data / name)
        g = t[t.kind == "gemm"].copy()
        g["tflops"] = g.flops / g.time_s / 1e12
        best = g.loc[g.tflops.idxmax()]
        big = g[(g.m >= 4096) & (g.n >= 4096) & (g.k >= 4096) & (g.m == g.n) & (g.n == g.k)]
        a = t[t.kind == "attention"].copy()
        a_best = (a.flops / a.time_s).max() / 1e12 if len(a) else float("nan")
        print(f"| {name} | {len(g):,} | {best.tflops:.0f} ({int(best.m)}×{int(best.n)}×{int(best.k)}, {best.layout}) | "
              f"{big.tflops.median():.0f} | {len(a)} | {a_best:.0f} |")


# ---- README.md, "Are the numbers right?" ---------------------------------------------------------------------------
def readme_validation() -> None:
    """The accuracy table of README.md (the summary of ``trainsim validate``, docs/VALIDATION.md)."""
    from trainsim.validation.report import SOURCE_NAMES, run_validation

    report = run_validation()
    print("\n| source | rows | MAPE | max error | held-out MAPE |\n|---|---:|---:|---:|---:|")
    for k in report.sources():
        n = sum(1 for r in report.rows if r.source == k)
        print(f"| {SOURCE_NAMES.get(k, k)} | {n} | {report.mape(source=k):.1%} | {report.max_error(source=k):.1%} | "
              f"{report.mape(held_out=True, source=k):.1%} |")
    print(f"| **all** | {len(report.rows)} | **{report.mape():.1%}** | {report.max_error():.1%} | "
          f"{report.mape(held_out=True):.1%} |")


# ---- docs/model.md, "Case study: Llama 3 405B as Meta ran it" -------------------------------------------------------
#: Table 4 of "The Llama 3 Herd of Models": (GPUs, sequence, global batch in sequences, CP, label, published BF16 MFU).
LLAMA3_RUNS = ((8192, 8192, 2048, 1, "8K GPUs, 8K seq", 0.43), (16384, 8192, 2048, 1, "16K GPUs, 8K seq", 0.41),
               (16384, 131072, 128, 16, "16K GPUs, 131K seq, CP 16", 0.38))


def meta_llama3() -> None:
    """Llama 3 405B (TP 8, PP 16, FSDP) with ``--framework meta-llama3`` at vpp 1/2/4/8 beside the published MFU."""
    import trainsim

    print("\n| run (Table 4) | vpp | iteration: analytic / event | MFU (causal FLOPs): analytic / event | MFU "
          "(megatron FLOPs), analytic | bubble, analytic | peak memory (required) | published MFU |\n"
          "|---|---|---|---|---|---|---|---|")
    for gpus, seq, gbs, cp, label, published in LLAMA3_RUNS:
        for vpp in (1, 2, 4, 8):
            kw: dict[str, Any] = dict(system="dgx-h100", framework="meta-llama3", tp=8, pp=16, cp=cp, vpp=vpp,
                                      num_gpus=gpus, seq_length=seq, global_batch_size=gbs, micro_batch_size=1,
                                      sequence_parallel=True)
            p = trainsim.predict("llama3-405b", flops_convention="causal", **kw)
            e = trainsim.predict("llama3-405b", flops_convention="causal", engine="event", **kw)
            mfu_megatron = trainsim.predict("llama3-405b", **kw).mfu
            required = max(s.required_bytes for s in p.memory.per_stage) / 1e9
            fit = ("fits, tight" if p.memory.tight else "fits") if p.memory.fits else "OOM"
            print(f"| {label} | {vpp} | {p.iteration_time_s:.2f} s / {e.iteration_time_s:.2f} s | {p.mfu:.1%} / "
                  f"{e.mfu:.1%} | {mfu_megatron:.1%} | {p.breakdown_s['pipeline_bubble']:.2f} s | "
                  f"{p.memory.peak_bytes / 1e9:.1f} GB ({required:.1f}) {fit} | {published:.0%} |".replace("%", " %"))


def model_profiles() -> None:
    """docs/model.md, the framework-profile field table and the shipped-profile table."""
    from trainsim.spec.framework_docs import fields_table, profiles_table

    print(fields_table())
    print()
    print(profiles_table())


SECTIONS = {"readme-validation": readme_validation, "search-mtnlg": search_mtnlg, "search-nvlink": search_nvlink,
            "search-plan": search_plan, "profiling-h100": profiling_h100, "meta-llama3": meta_llama3,
            "model-profiles": model_profiles}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=[*SECTIONS, "all"])
    args = ap.parse_args(argv)
    for name, fn in SECTIONS.items():
        if args.section in (name, "all"):
            print(f"\n## {name}: {fn.__doc__}")
            fn()


if __name__ == "__main__":
    main()
