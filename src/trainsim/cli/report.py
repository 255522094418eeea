"""Readable (rich) rendering of a prediction."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from trainsim.cli.output import fmt_bytes, fmt_seconds
from trainsim.predictor import Prediction


def print_prediction(p: Prediction, console: Console | None = None) -> None:
    """Print a prediction as tables."""
    console = console or Console()
    j = p.job
    title = (f"{j['model']['name']} on {j['num_gpus']}× {j['system']['gpu']['name']} "
             f"(tp {j['tp']}, pp {j['pp']}" + (f", vpp {j['vpp']}" if j['vpp'] > 1 else "")
             + (f", cp {j['cp']}" if j['cp'] > 1 else "") + (f", ep {j['ep']}" if j['ep'] > 1 else "")
             + f", dp {j['dp']}; mbs {j['micro_batch_size']}, gbs {j['global_batch_size']}, "
             f"seq {j['seq_length']}, {j['precision']}, {p.engine})")
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("iteration time", fmt_seconds(p.iteration_time_s))
    t.add_row("tokens/s", f"{p.tokens_per_s:,.0f}")
    t.add_row("tokens/s per GPU", f"{p.tokens_per_s_per_gpu:,.0f}")
    t.add_row("model TFLOP/s per GPU", f"{p.model_tflops_per_gpu:.1f}")
    t.add_row(f"MFU / HFU ({p.flops_convention} FLOPs)", f"{p.mfu:.1%} / {p.hfu:.1%}")
    t.add_row("pipeline bubble (share of the iteration)", f"{p.bubble_fraction:.1%}")
    if p.measured_compute_fraction or p.measured_comm_fraction:
        t.add_row("from measured tables (compute / comm)",
                  f"{p.measured_compute_fraction:.0%} / {p.measured_comm_fraction:.0%}")
    if p.training is not None:
        tr = p.training
        t.add_row("training tokens", f"{tr.tokens:.3g}")
        t.add_row("training time", f"{tr.days:,.1f} days")
        t.add_row("GPU-hours", f"{tr.gpu_hours:,.0f}")
        t.add_row("cost", f"${tr.cost_usd:,.0f} at ${tr.price_per_gpu_hour:.2f}/GPU-h")
    console.print(t)

    b = Table(title="where the time goes (exposed, sums to the iteration)", title_justify="left")
    b.add_column("category")
    b.add_column("time", justify="right")
    b.add_column("share", justify="right")
    for k, v in p.breakdown_s.items():
        if v > 0:
            b.add_row(k, fmt_seconds(v), f"{v / p.iteration_time_s:.1%}")
    console.print(b)
    if p.moe:
        _print_moe(p.moe, console)

    m = Table(title=f"memory per GPU (capacity {fmt_bytes(p.memory.capacity_bytes)})", title_justify="left")
    for col in ("stage", "weights", "grads", "optimizer", "activations", "other", "total"):
        m.add_column(col, justify="right")
    stages = p.memory.per_stage
    shown = stages if len(stages) <= 8 else [*stages[:3], None, *stages[-3:]]
    for s in shown:
        if s is None:
            m.add_row("…", "", "", "", "", "", "")
            continue
        m.add_row(str(s.stage), fmt_bytes(s.weights_bytes), fmt_bytes(s.gradients_bytes), fmt_bytes(s.optimizer_bytes),
                  fmt_bytes(s.activations_bytes), fmt_bytes(s.other_bytes), fmt_bytes(s.total_bytes))
    console.print(m)
    verdict = ("[yellow]fits, tight (within 10% of capacity)[/yellow]" if p.memory.tight
               else "[green]fits[/green]" if p.memory.fits else "[red]does NOT fit[/red]")
    console.print(f"peak {fmt_bytes(p.memory.peak_bytes)}: {verdict}")
    for note in p.approximations:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def _print_moe(moe: dict[str, Any], console: Console) -> None:
    """MoE time per stage and iteration: all-to-all dispatch + combine (and the part left exposed), expert GEMMs,
    router with the permutations, shared expert."""
    title = (f"MoE per iteration ({moe['num_experts']} experts, top-{moe['topk']}, ep {moe['ep']}, etp {moe['etp']}, "
             f"expert-dp {moe['expert_dp']}; EP group on {moe['ep_group_nodes']} node(s))")
    t = Table(title=title, title_justify="left")
    for col in ("stage", "layers", "a2a", "exposed", "experts", "router", "shared"):
        t.add_column(col, justify="right", no_wrap=True)
    for row in moe["per_stage"]:
        it = row["per_iteration"]
        t.add_row(str(row["stage"]), str(row["moe_layers"]),
                  fmt_seconds(it.get("dispatch_s", 0.0) + it.get("combine_s", 0.0)),
                  fmt_seconds(it.get("ep_exposed_s", 0.0)), fmt_seconds(it.get("expert_gemm_s", 0.0)),
                  fmt_seconds(it.get("router_s", 0.0) + it.get("permute_s", 0.0)),
                  fmt_seconds(it.get("shared_expert_s", 0.0)))
    console.print(t)
