"""``trainsim presets``: list model and system presets."""

from __future__ import annotations

import typer

from trainsim.cli import app


@app.command("presets")
def presets_command(
    models: bool = typer.Option(False, "--models", help="only models"),
    systems: bool = typer.Option(False, "--systems", help="only systems"),
    frameworks: bool = typer.Option(False, "--frameworks", help="only framework profiles (software stacks)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """List the model, system and framework presets with their key numbers and sources."""
    from rich.console import Console
    from rich.table import Table

    from trainsim.spec.framework import list_frameworks, load_framework
    from trainsim.spec.presets import list_models, list_systems, load_model, load_system

    none = not (models or systems or frameworks)
    rows_m = [load_model(n) for n in list_models()] if models or none else []
    rows_s = [load_system(n) for n in list_systems()] if systems or none else []
    rows_f = [load_framework(n) for n in list_frameworks()] if frameworks or none else []
    if json_out:
        from trainsim.cli.output import print_json

        print_json({
            "models": {m.name: {**m.model_dump(exclude_none=True), "num_params": m.num_params} for m in rows_m},
            "systems": {s.name: s.model_dump(exclude_none=True) for s in rows_s},
            "frameworks": {f.name: f.model_dump() for f in rows_f},
        })
        return
    console = Console()
    if rows_f:
        t = Table(title="framework profiles (--framework)", title_justify="left")
        for c in ("name", "version", "layers", "attention", "optimizer", "master/states", "DP engine", "pipeline"):
            t.add_column(c)
        for f in rows_f:
            t.add_row(f.name, f.version, f.transformer_impl, f.attention_backend, f.optimizer_impl,
                      f"{f.main_params_dtype}/{f.exp_avg_dtype}", f.dp_engine + (f" / {f.sharded_engine}"
                                                                                 if f.sharded_engine else ""),
                      f.pipeline_engine)
        console.print(t)
    if rows_m:
        t = Table(title="model presets", title_justify="left")
        for c in ("name", "params", "layers", "hidden", "heads", "kv", "ffn", "vocab", "seq", "type"):
            t.add_column(c, justify="right" if c not in ("name", "type") else "left")
        for m in rows_m:
            kind = "MoE" if m.is_moe else ("SwiGLU" if m.swiglu else "GELU")
            t.add_row(m.name, f"{m.num_params / 1e9:.1f}B", str(m.num_layers), str(m.hidden_size),
                      str(m.num_attention_heads), str(m.query_groups), str(m.ffn_size), str(m.vocab_size),
                      str(m.seq_length), kind)
        console.print(t)
    if rows_s:
        t = Table(title="system presets", title_justify="left")
        for c in ("name", "gpu", "bf16 TFLOP/s", "HBM", "GPUs/node", "NVLink GB/s", "NICs × Gb/s", "$/GPU-h"):
            t.add_column(c)
        for s in rows_s:
            t.add_row(s.name, s.gpu.name, f"{s.gpu.peak_flops.bf16 / 1e12:.0f}", f"{s.gpu.hbm_capacity / 1e9:.0f} GB",
                      str(s.node.gpus_per_node), f"{s.node.nvlink_bandwidth / 1e9:.0f}",
                      f"{s.network.nics_per_node} × {s.network.nic_bandwidth * 8 / 1e9:.0f}",
                      f"{s.price_per_gpu_hour:.2f}")
        console.print(t)
