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

    from trainsim.spec.framework import list_frameworks, load_framework, preset_versions
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
            "frameworks": {f.name: {**f.model_dump(), "versions": list(preset_versions(f.name))} for f in rows_f},
        })
        return
    console = Console()
    narrow = console.width < 110
    if rows_f:
        cols = ["name", "version", "attention", "pipeline", "DP engine"] if narrow else \
            ["name", "version", "layers", "attention", "optimizer", "master/states", "DP engine", "pipeline"]
        rows = []
        for f in rows_f:
            values = {"name": f.name, "version": ", ".join(preset_versions(f.name)), "layers": f.transformer_impl,
                      "attention": f.attention_backend + (f" ({f.flash_kernel})" if f.attention_backend == "flash"
                                                          else ""),
                      "optimizer": f.optimizer_impl,
                      "master/states": f"{f.main_params_dtype}/{f.exp_avg_dtype}",
                      "DP engine": f.dp_engine + (f" / {f.sharded_engine}" if f.sharded_engine else ""),
                      "pipeline": f.pipeline_engine}
            rows.append([values[c] for c in cols])
        console.print(_table("framework profiles (--framework)", cols, rows, console.width))
    if rows_m:
        cols = ["name", "params", "layers", "hidden", "seq", "type"] if narrow else \
            ["name", "params", "layers", "hidden", "heads", "kv", "ffn", "vocab", "seq", "type"]
        rows = []
        for m in rows_m:
            values = {"name": m.name, "params": f"{m.num_params / 1e9:.1f}B", "layers": str(m.num_layers),
                      "hidden": str(m.hidden_size), "heads": str(m.num_attention_heads), "kv": str(m.query_groups),
                      "ffn": str(m.ffn_size), "vocab": str(m.vocab_size), "seq": str(m.seq_length),
                      "type": "MoE" if m.is_moe else ("SwiGLU" if m.swiglu else "GELU")}
            rows.append([*(values[c] for c in cols), _one_line(m.source)])
        console.print(_table("model presets (--model)", [*cols, "source"], rows, console.width))
    if rows_s:
        cols = ["name", "gpu", "HBM", "GPUs/node", "$/GPU-h"] if narrow else \
            ["name", "gpu", "bf16 TFLOP/s", "HBM", "GPUs/node", "NVLink GB/s", "NICs × Gb/s", "$/GPU-h"]
        rows = []
        for s in rows_s:
            values = {"name": s.name, "gpu": s.gpu.name, "bf16 TFLOP/s": _tflops(s.gpu.peak_flops.bf16),
                      "HBM": f"{s.gpu.hbm_capacity / 1e9:.0f} GB", "GPUs/node": str(s.node.gpus_per_node),
                      "NVLink GB/s": f"{s.node.nvlink_bandwidth / 1e9:.0f}",
                      "NICs × Gb/s": f"{s.network.nics_per_node} × {s.network.nic_bandwidth * 8 / 1e9:.0f}",
                      "$/GPU-h": f"{s.price_per_gpu_hour:.2f}"}
            rows.append([*(values[c] for c in cols), _one_line(s.source)])
        console.print(_table("system presets (--system)", [*cols, "source"], rows, console.width))
    if narrow:
        console.print("(narrow terminal: fewer columns; --json has every field)", style="dim", highlight=False)


def _table(title: str, cols: list[str], rows: list[list[str]], width: int):  # type: ignore[no-untyped-def]
    """A compact table that fits ``width``: every column on one line, the last one cut with an ellipsis."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    sizes = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    left = width - sum(sizes[:-1]) - 2 * len(cols) - 1
    for i, c in enumerate(cols):
        last = i == len(cols) - 1
        t.add_column(c, no_wrap=True, overflow="ellipsis", min_width=None if last else sizes[i],
                     max_width=max(left, 8) if last else None,
                     justify="right" if c in ("params", "layers", "hidden", "heads", "kv", "ffn", "vocab", "seq",
                                              "HBM", "GPUs/node", "$/GPU-h", "bf16 TFLOP/s", "NVLink GB/s",
                                              "NICs × Gb/s") else "left")
    for r in rows:
        t.add_row(*r)
    return t


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _tflops(flops: float | None) -> str:
    """A peak in TFLOP/s for the table; a GPU without those tensor cores: none."""
    return "none" if flops is None else f"{flops / 1e12:.0f}"
