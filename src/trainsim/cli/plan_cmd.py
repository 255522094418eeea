"""``trainsim plan``: how big a model to train, compute-optimally, with these GPUs for these days (or dollars)."""

from __future__ import annotations

from typing import Any

import typer

from trainsim.cli import app


@app.command("plan")
def plan_command(
    system: str = typer.Option("dgx-h100", "--system", "-s", help="system preset or YAML file"),
    num_gpus: int = typer.Option(..., "--num-gpus", "-n", help="GPUs you can use"),
    days: float | None = typer.Option(None, "--days", help="wall-clock days you can train"),
    budget: float | None = typer.Option(None, "--budget", help="dollars you can spend (with the price)"),
    price_per_gpu_hour: float | None = typer.Option(
        None, "--price-per-gpu-hour", help="USD per GPU-hour (default: the system's, from presets/prices.yaml)"),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs per NVLink domain"),
    global_batch_size: int = typer.Option(1920, "--global-batch-size", "--gbs", help="global batch (sequences)"),
    seq_length: int = typer.Option(2048, "--seq-length", help="training sequence length"),
    precision: str = typer.Option("bf16", "--precision", help="bf16, fp16, fp8 or fp32"),
    template: str = typer.Option("gpt3-175b", "--template",
                                 help="model whose architecture family the shapes keep (vocab, FFN, norms, GQA)"),
    head_size: int = typer.Option(128, "--head-size", help="attention head size of every shape"),
    min_aspect: float = typer.Option(96.0, "--min-aspect", help="smallest hidden/layers ratio of a shape"),
    max_aspect: float = typer.Option(200.0, "--max-aspect", help="largest hidden/layers ratio of a shape"),
    tp: str | None = typer.Option(None, "--tp", help="tensor parallel sizes (default: within an NVLink domain)"),
    pp: str | None = typer.Option(None, "--pp", help="pipeline sizes (default: all)"),
    vpp: str | None = typer.Option(None, "--vpp", help="virtual stages (default 1)"),
    mbs: str | None = typer.Option(None, "--mbs", "--micro-batch-size", help="micro-batch sizes (default: all)"),
    recompute: str | None = typer.Option(None, "--recompute-granularity",
                                         help="none, selective, full or a list (default: all)"),
    zero_stage: str | None = typer.Option(None, "--zero-stage", help="ZeRO stages (default 1: distributed optimizer)"),
    sp: str | None = typer.Option(None, "--sp", help="sequence parallelism: true, false or all (default true)"),
    workers: int | None = typer.Option(None, "--workers", help="worker processes (default: all CPUs)"),
    backend: str = typer.Option("local", "--backend", help="local or ray"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    html: str | None = typer.Option(None, "--html", metavar="FILE",
                                    help="write an interactive report (one self-contained HTML file)"),
) -> None:
    """Naive (100 % utilization) and realistic compute-optimal model sizes for a GPU budget, with their plans."""
    from trainsim.cli.output import check_outputs
    from trainsim.errors import TrainsimError
    from trainsim.plan import plan
    from trainsim.spec.presets import load_system
    from trainsim.spec.training import Training

    check_outputs({"--html": html})
    sysm = load_system(system)
    if gpus_per_node is not None:
        sysm = sysm.replace(node=sysm.node.replace(gpus_per_node=gpus_per_node))
    if precision not in ("bf16", "fp16", "fp8", "fp32"):
        raise TrainsimError("precision", f"unknown precision {precision!r}", "use bf16, fp16, fp8 or fp32")
    training = Training(global_batch_size=global_batch_size, seq_length=seq_length, precision=precision)
    given = {"tp": tp, "pp": pp, "vpp": vpp, "micro_batch_size": mbs, "recompute": recompute,
             "zero_stage": zero_stage, "sequence_parallel": sp}
    dims = {k: v for k, v in given.items() if v is not None}
    result = plan(sysm, num_gpus, days, budget_usd=budget, price_per_gpu_hour=price_per_gpu_hour,
                  training=training, template=template, dims=dims, head_size=head_size, min_aspect=min_aspect,
                  max_aspect=max_aspect, backend=backend, workers=workers)
    data = result.to_json_dict()
    if html is not None:
        from trainsim.report.plan import write_plan_report

        write_plan_report(data, html)
    if json_out:
        from trainsim.cli.output import print_json

        print_json(data)
        return
    _print(data)
    if html is not None:
        print(f"report written to {html}")


def _print(d: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    b = d["budget"]
    console.print(f"budget: {b['num_gpus']:,} GPUs × {b['days']:.1f} days = {b['gpu_hours']:,.0f} GPU-hours "
                  f"(${b['cost_usd']:,.0f} at ${b['price_per_gpu_hour']:.2f}/GPU-h), "
                  f"C = {b['compute_flops']:.3g} FLOP at 100 % utilization"
                  + ("; limited by the dollar budget" if b["limited_by"] == "budget" else ""), highlight=False)
    t = Table(title="compute-optimal model (Chinchilla: N ≈ 0.089·C^0.5, T ≈ 1.875·C^0.5)", title_justify="left",
              caption="naive: C at 100 % utilization, its days predicted with the best plan of the nearest shape; "
                      "realistic: the largest shape whose Chinchilla tokens train within the budget",
              caption_justify="left")
    for col in ("point", "params", "tokens", "L×h", "tp·pp·dp", "MFU", "days", "cost"):
        t.add_column(col, justify="right")
    n = d["naive"]
    shape = n.get("shape")
    t.add_row("naive", f"{n['params'] / 1e9:,.1f}B", f"{n['tokens'] / 1e12:,.2f}T",
              f"{shape['layers']}×{shape['hidden_size']}" if shape else "–", _plan_text(n.get("plan")),
              f"{n['mfu']:.1%}" if n["mfu"] is not None else "–",
              f"{n['days']:,.1f}" if n["days"] is not None else "–",
              f"${n['cost_usd'] / 1e6:,.2f}M" if n["cost_usd"] else "–")
    o = d["optimal"]
    if o is not None:
        t.add_row("realistic", f"{o['params'] / 1e9:,.1f}B", f"{o['tokens'] / 1e12:,.2f}T",
                  f"{o['layers']}×{o['hidden_size']}", _plan_text(o["plan"]), f"{o['mfu']:.1%}",
                  f"{o['days']:,.1f}", f"${o['cost_usd'] / 1e6:,.2f}M" if o["cost_usd"] else "–")
    console.print(t)
    s = d["search"]
    console.print(f"{s['shapes_evaluated']} of {s['shapes_considered']} shapes of the {s['template']} family evaluated "
                  f"({s['shapes_without_layout']} without a layout on these GPUs) in {s['seconds']:.1f} s",
                  highlight=False)
    if o is None:
        console.print("[red]no shape trains its Chinchilla tokens within the budget[/red]")


def _plan_text(p: dict[str, Any] | None) -> str:
    if not p:
        return "–"
    text = f"{p['tp']}·{p['pp']}·{p['dp']}" + (f" vpp{p['vpp']}" if p["vpp"] > 1 else "")
    return text + f" mbs{p['micro_batch_size']} {p['recompute']}"
