"""``trainsim profile``, ``trainsim import-nccl-tests``, ``trainsim fit-comm`` and ``trainsim merge-tables``.

The measured-cost workflow: ``profile`` times the operators of a job (or sweeps shapes) into an operator table,
``import-nccl-tests`` turns nccl-tests output into a collective table, ``fit-comm`` fits the α-β efficiencies of a
system from collective tables, and ``predict --op-costs/--comm-costs`` uses the tables (see docs/profiling.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from trainsim.cli import app
from trainsim.cli.job_options import JobCommand, job_from_options, with_job_options
from trainsim.io.atomic import write_text_atomic


def _ints(text: str | None, flag: str) -> list[int] | None:
    from trainsim.errors import TrainsimError

    if text is None:
        return None
    try:
        values = [int(float(v)) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise TrainsimError(flag.lstrip("-").replace("-", "_"), f"cannot read {text!r} as integers",
                            f"give a comma-separated list, e.g. {flag} 256,1024,4096") from None
    if not values or any(v < 1 for v in values):
        raise TrainsimError(flag.lstrip("-").replace("-", "_"), f"{text!r} must list positive integers",
                            f"e.g. {flag} 256,1024,4096")
    return values


def _has_model(values: dict[str, Any]) -> bool:
    return bool(values.get("model")) or any(values.get(k) is not None for k in ("num_layers", "hidden_size"))


def _profile_job(values: dict[str, Any]) -> Any:
    values = dict(values)
    if values.get("global_batch_size") is None:  # profiling looks at one micro-batch: any consistent batch will do
        mp = (values.get("tp") or 1) * (values.get("pp") or 1) * (values.get("cp") or 1)
        dp = values.get("dp") or max(1, (values.get("num_gpus") or mp) // mp)
        values["global_batch_size"] = (values.get("micro_batch_size") or 1) * dp
    return job_from_options(values)


@app.command("profile", cls=JobCommand)
@with_job_options()
def profile_command(
    out: Path = typer.Option(..., "--out", "-o", help="operator table to write (Parquet)"),
    device: str = typer.Option("cuda", "--device", help="cuda, cuda:N or cpu"),
    sweep: bool = typer.Option(False, "--sweep", help="measure grids of GEMM and attention shapes (and, with a "
                               "model, its layer at --sweep-seq-lengths / --sweep-micro-batches)"),
    warmup: int | None = typer.Option(None, "--warmup", help="untimed calls per operator (default 3; sweep 2)"),
    reps: int | None = typer.Option(None, "--reps", help="timed repetitions per operator (default 10; sweep 5)"),
    min_rep_ms: float | None = typer.Option(None, "--min-rep-ms", help="shortest repetition; short operators "
                                            "repeat inside it (default 1 ms on GPU, 2 ms on CPU)"),
    min_warmup_ms: float = typer.Option(50.0, "--min-warmup-ms", help="warm each operator up at least this long "
                                        "(spins up CPU thread pools and GPU clocks)"),
    threads: int | None = typer.Option(None, "--threads", help="PyTorch CPU threads (default: PyTorch's)"),
    attention_backend: str = typer.Option("auto", "--attention-backend", help="SDPA backend: auto (PyTorch's "
                                          "choice), flash, cudnn, efficient or math"),
    optimizer_dtype: str = typer.Option("fp32", "--optimizer-dtype", help="parameter/Adam-state type of the "
                                        "optimizer step: fp32 (master weights, Megatron) or bf16/fp16"),
    no_optimizer: bool = typer.Option(False, "--no-optimizer", help="do not time the optimizer step"),
    gpu_name: str | None = typer.Option(None, "--gpu-name", help="label the table with this GPU name instead of "
                                        "the device's"),
    gemm_sizes: str | None = typer.Option(None, "--gemm-sizes", help="sweep: GEMM M, N and K values "
                                          "(default 256,...,16384 in powers of 2)"),
    sweep_layouts: str = typer.Option("fwd,dgrad,wgrad", "--sweep-layouts", help="sweep: GEMM operand layouts"),
    attn_seq_lengths: str | None = typer.Option(None, "--attn-seq-lengths", help="sweep: attention sequence "
                                                "lengths (default 512,...,16384)"),
    attn_batch_heads: str | None = typer.Option(None, "--attn-batch-heads", help="sweep: batch x heads "
                                                "(default 8,16,32,64,128)"),
    attn_head_dims: str | None = typer.Option(None, "--attn-head-dims", help="sweep: head sizes (default 64,128)"),
    sweep_seq_lengths: str | None = typer.Option(None, "--sweep-seq-lengths", help="sweep with a model: its "
                                                 "layer at these sequence lengths"),
    sweep_micro_batches: str | None = typer.Option(None, "--sweep-micro-batches", help="sweep with a model: "
                                                   "its layer at these micro-batch sizes"),
    json_out: bool = typer.Option(False, "--json", help="print a JSON summary"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress on stderr"),
    *,
    job_options: dict[str, Any],
) -> None:
    """Time the operators of one GPU of a job (or sweep shapes) with PyTorch and write an operator table."""
    from trainsim.cli.output import check_outputs
    from trainsim.cost.tables import write_table
    from trainsim.errors import TrainsimError
    from trainsim.profile.runner import profile_job, profile_sweep

    check_outputs({"--out": out})
    min_rep_s = None if min_rep_ms is None else min_rep_ms * 1e-3
    from trainsim.cli.progress import counted

    with counted("profile", enabled=not quiet) as tick:
        def progress(i: int, n: int, what: str) -> None:
            tick(i, n, "operators")

        job = _profile_job(job_options) if _has_model(job_options) else None
        if sweep:
            dtype = job.training.precision if job is not None else _precision_flag(job_options)
            dtypes = ["tf32" if dtype == "fp32" else dtype]
            df = profile_sweep(
                device, dtypes=dtypes,
                gemm_sizes=_ints(gemm_sizes, "--gemm-sizes") or _default("gemm"),
                layouts=[s.strip() for s in sweep_layouts.split(",") if s.strip()],
                attn_seq_lengths=_ints(attn_seq_lengths, "--attn-seq-lengths") or _default("seq"),
                attn_batch_heads=_ints(attn_batch_heads, "--attn-batch-heads") or _default("bh"),
                attn_head_dims=_ints(attn_head_dims, "--attn-head-dims") or _default("dims"),
                job=job, seq_lengths=_ints(sweep_seq_lengths, "--sweep-seq-lengths") or (),
                micro_batch_sizes=_ints(sweep_micro_batches, "--sweep-micro-batches") or (),
                warmup=2 if warmup is None else warmup, reps=5 if reps is None else reps, min_rep_s=min_rep_s,
                min_warmup_s=min_warmup_ms * 1e-3, attention_backend=attention_backend, gpu_name=gpu_name,
                threads=threads, progress=progress)
        else:
            if job is None:
                raise TrainsimError("model", "profile needs a model", "give --model NAME (or the architecture flags), "
                                    "or --sweep for shape grids")
            df = profile_job(job, device, warmup=3 if warmup is None else warmup, reps=10 if reps is None else reps,
                             min_rep_s=min_rep_s, min_warmup_s=min_warmup_ms * 1e-3,
                             attention_backend=attention_backend, optimizer=not no_optimizer,
                             optimizer_dtype=optimizer_dtype, gpu_name=gpu_name, threads=threads, progress=progress)
    if df.empty:
        raise TrainsimError("profile", "nothing was measured", "check the device memory and the shapes")
    write_table(df, out, "ops")
    _report_profile(df, out, job, json_out)


def _precision_flag(values: dict[str, Any]) -> str:
    for p in ("fp16", "fp8", "fp32", "bf16"):
        if values.get(p):
            return p
    return "bf16"


def _default(which: str) -> list[int]:
    from trainsim.profile import runner

    return list({"gemm": runner.DEFAULT_GEMM_SIZES, "seq": runner.DEFAULT_ATTN_SEQ_LENGTHS,
                 "bh": runner.DEFAULT_ATTN_BATCH_HEADS, "dims": runner.DEFAULT_ATTN_HEAD_DIMS}[which])


def _shape(r: Any) -> str:
    if r.kind == "gemm":
        return f"{r.batch}x{r.m}x{r.n}x{r.k}" if r.batch > 1 else f"{r.m}x{r.n}x{r.k}"
    if r.kind == "attention":
        return f"b{r.attn_batch} h{r.attn_heads} s{r.attn_seq_q}/{r.attn_seq_kv} d{r.attn_head_dim}" + \
            (" causal" if r.attn_causal else "")
    if r.kind == "optimizer":
        return f"{r.params:,} params"
    return f"{r.bytes / 1e6:.2f} MB"


def _report_profile(df: Any, out: Path, job: Any, json_out: bool) -> None:
    layer = df[(df["source"] == "layer") & (df["kind"] != "optimizer")]
    first = df.iloc[0]
    summary: dict[str, Any] = {
        "out": str(out), "rows": len(df), "device": first["device"], "device_name": first["device_name"],
        "gpu": first["gpu"], "torch_version": first["torch_version"],
    }
    if job is not None:
        from trainsim.workload.layers import layer_work, shard_of

        work = layer_work(job.model, shard_of(job), False)
        times = {(r.name, r.phase): float(r.time_s) for r in layer.itertuples(index=False)}
        summary["layer_fwd_s"] = sum(times.get((op.name, op.phase), 0.0) for op in work.fwd)
        summary["layer_bwd_s"] = sum(times.get((op.name, op.phase), 0.0) for op in work.bwd)
        opt = df[df["kind"] == "optimizer"]
        if len(opt):
            summary["optimizer_s_per_param"] = float(opt["time_s"].iloc[0] / opt["params"].iloc[0])
    if json_out:
        from trainsim.cli.output import print_json

        summary["ops"] = [{"name": r.name, "phase": r.phase, "kind": r.kind, "shape": _shape(r), "dtype": r.dtype,
                           "source": r.source, "time_s": float(r.time_s), "time_std_s": float(r.time_std_s)}
                          for r in df.itertuples(index=False)]
        print_json(summary)
        return
    from rich.console import Console
    from rich.table import Table

    from trainsim.cli.output import fmt_seconds

    console = Console()
    if len(layer) and len(layer) <= 80:
        t = Table(title=f"measured on {first['device_name']} ({first['gpu']})", title_justify="left")
        for col in ("op", "phase", "shape", "dtype", "median", "± std", "backend"):
            t.add_column(col, justify="right" if col in ("median", "± std") else "left")
        for r in layer.itertuples(index=False):
            t.add_row(r.name, r.phase, _shape(r), r.dtype, fmt_seconds(float(r.time_s)),
                      fmt_seconds(float(r.time_std_s)), r.backend or r.builder)
        console.print(t)
    if "layer_fwd_s" in summary:
        console.print(f"one layer: forward {fmt_seconds(summary['layer_fwd_s'])}, "
                      f"backward {fmt_seconds(summary['layer_bwd_s'])}")
    if "optimizer_s_per_param" in summary:
        console.print(f"optimizer step: {summary['optimizer_s_per_param'] * 1e9:.3f} ns per parameter")
    sweep = df[df["source"] == "sweep"]
    if len(sweep):
        console.print(f"sweep: {int((sweep['kind'] == 'gemm').sum())} GEMM and "
                      f"{int((sweep['kind'] == 'attention').sum())} attention shapes")
    console.print(f"wrote {out} ({len(df)} rows)")


@app.command("import-nccl-tests")
def import_nccl_tests_command(
    logs: list[Path] = typer.Argument(..., help="nccl-tests output: text log(s) or -J JSON"),
    out: Path = typer.Option(..., "--out", "-o", help="collective table to write (Parquet)"),
    collective: str | None = typer.Option(None, "--collective", "-c", help="all_reduce, all_gather, "
                                          "reduce_scatter, all_to_all or send_recv (when the log does not say; "
                                          "selects one run of a log with several)"),
    num_gpus: int | None = typer.Option(None, "--num-gpus", "-n", help="total GPUs of the run (when the log does "
                                        "not list its ranks)"),
    nodes: int | None = typer.Option(None, "--nodes", help="nodes of the run (default: from the host names, else 1)"),
    gpu_name: str | None = typer.Option(None, "--gpu-name", help="GPU name for the table (default: from the log)"),
    json_out: bool = typer.Option(False, "--json", help="print a JSON summary"),
) -> None:
    """Read nccl-tests output (old and new text layouts, launcher prefixes, JSON) into a collective table."""
    import pandas as pd

    from trainsim.cli.output import check_outputs
    from trainsim.cost.tables import write_table
    from trainsim.io.frames import as_int
    from trainsim.io.nccl_tests import comm_table, read_nccl_tests

    check_outputs({"--out": out})
    frames = [comm_table(read_nccl_tests(p), collective, num_gpus, nodes, gpu_name, source=p.name) for p in logs]
    df = pd.concat(frames, ignore_index=True)
    write_table(df, out, "comm")
    groups = []
    for (coll, ranks, n), g in df.groupby(["collective", "ranks", "nodes"], sort=True):
        groups.append({"collective": coll, "ranks": as_int(ranks), "nodes": as_int(n), "rows": len(g),
                       "min_bytes": int(g["nbytes"].min()), "max_bytes": int(g["nbytes"].max()),
                       "min_time_s": float(g["time_s"].min()), "peak_busbw": float(g["busbw"].max()),
                       "gpu": str(g["gpu"].iloc[0])})
    if json_out:
        from trainsim.cli.output import print_json

        print_json({"out": str(out), "rows": len(df), "groups": groups})
        return
    from rich.console import Console
    from rich.table import Table

    from trainsim.cli.output import fmt_seconds

    t = Table(title="imported collectives", title_justify="left")
    for col in ("collective", "ranks", "nodes", "GPU", "sizes", "smallest time", "peak bus bw"):
        t.add_column(col, justify="left" if col in ("collective", "GPU") else "right")
    for g in groups:
        t.add_row(g["collective"], str(g["ranks"]), str(g["nodes"]), g["gpu"] or "?",
                  f"{_fmt_size(g['min_bytes'])}–{_fmt_size(g['max_bytes'])} ({g['rows']})",
                  fmt_seconds(g["min_time_s"]), f"{g['peak_busbw'] / 1e9:.1f} GB/s")
    console = Console()
    console.print(t)
    console.print(f"wrote {out} ({len(df)} rows)")


def _fmt_size(n: float) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


@app.command("fit-comm")
def fit_comm_command(
    tables: list[Path] = typer.Argument(..., help="collective tables (trainsim import-nccl-tests)"),
    system: str = typer.Option("dgx-h100", "--system", "-s", help="system preset or YAML the tables come from"),
    out: Path | None = typer.Option(None, "--out", "-o", help="write the fitted calibration YAML here"),
    system_out: Path | None = typer.Option(None, "--system-out", help="write a copy of the system YAML with the "
                                           "fitted latencies"),
    json_out: bool = typer.Option(False, "--json", help="print the fits as JSON"),
) -> None:
    """Fit the NVLink and network efficiencies (and latencies) of a system from measured collective tables."""
    from trainsim.cli.output import check_outputs
    from trainsim.profile.fit_comm import fit_comm
    from trainsim.spec.presets import load_system

    check_outputs({"--out": out, "--system-out": system_out})
    sys_ = load_system(system)
    result = fit_comm(tables, sys_)
    text = result.to_yaml()
    if out is not None:
        _write(out, text)
    if system_out is not None:
        _write(system_out, _system_yaml(system, result.latencies_us()))
    if json_out:
        from trainsim.cli.output import print_json

        print_json(result.as_dict())
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"alpha-beta fit for {sys_.name}", title_justify="left")
    for col in ("tier", "collective", "groups", "rows", "efficiency", "latency", "median |err|", "max |err|"):
        t.add_column(col, justify="left" if col in ("tier", "collective", "groups") else "right")
    for f in result.fits:
        t.add_row(f.tier, f.collective, ", ".join(f"{r}/{n}" for r, n in f.groups), str(f.rows),
                  f"{f.efficiency:.3f}", f"{f.latency_s * 1e6:.2f} µs", f"{f.median_abs_error:.1%}",
                  f"{f.max_abs_error:.1%}")
    console = Console()
    console.print(t)
    console.print(f"calibration: {result.calibration()}; latencies (system YAML): {result.latencies_us()}")
    if out is not None:
        console.print(f"wrote {out} (use: trainsim predict ... --calibration {out})")
    if system_out is not None:
        console.print(f"wrote {system_out} (use: trainsim predict ... --system {system_out})")


def _write(path: Path, text: str) -> None:
    from trainsim.errors import TrainsimError

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise TrainsimError("out", f"cannot write {path} ({exc})", "choose a writable path") from None


def _system_yaml(system: str, latencies_us: dict[str, float]) -> str:
    """The readable system YAML of ``system`` (preset or file) with fitted latencies put in."""
    from importlib import resources

    import yaml

    from trainsim.spec.presets import list_systems

    if system.lower() in list_systems():
        text = (resources.files("trainsim") / "presets" / "systems" / f"{system.lower()}.yaml").read_text()
    else:
        text = Path(system).read_text()
    data = yaml.safe_load(text)
    if "nvlink_latency_us" in latencies_us:
        data.setdefault("node", {})["nvlink_latency_us"] = latencies_us["nvlink_latency_us"]
    if "latency_us" in latencies_us:
        data.setdefault("network", {})["latency_us"] = latencies_us["latency_us"]
    data["name"] = f"{data.get('name', 'system')}-fitted"
    return "# latencies fitted by trainsim fit-comm\n" + yaml.safe_dump(data, sort_keys=False)


@app.command("merge-tables")
def merge_tables_command(
    tables: list[Path] = typer.Argument(..., help="operator tables, or collective tables, of one GPU"),
    out: Path = typer.Option(..., "--out", "-o", help="merged table to write (Parquet)"),
) -> None:
    """Merge cost tables of one kind and one GPU (for a key in several tables, the last table given wins)."""
    from trainsim.cli.output import check_outputs
    from trainsim.cost.tables import merge_tables, table_kind, write_table
    from trainsim.errors import TrainsimError

    check_outputs({"--out": out})
    kinds = {table_kind(t) for t in tables}
    if len(kinds) > 1:
        raise TrainsimError("tables", "operator and collective tables cannot be merged together",
                            "merge tables of one kind")
    kind = kinds.pop()
    df = merge_tables(tables, kind)
    write_table(df, out, kind)
    typer.echo(f"wrote {out} ({len(df)} rows, {kind})")
