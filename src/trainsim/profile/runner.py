"""Profile runs: the necessary operators of a job, or sweeps over shapes, timed into an operator table.

:func:`profile_job` times every distinct operator (by :attr:`~trainsim.workload.ops.ComputeOp.key`) of one layer of
the job on one GPU — dense and, for MoE models, MoE layers — plus the input embedding and the output head, and the
optimizer step over one layer's parameters. :func:`profile_sweep` times grids of GEMM shapes (each operand layout)
and self-attention shapes, and optionally the job's layer at several sequence lengths and micro-batch sizes, so that
:mod:`trainsim.cost.tables` can interpolate. Both return a DataFrame in the operator-table schema; write it with
:func:`trainsim.cost.tables.write_table`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from trainsim.cost.tables import normalize, op_key_columns
from trainsim.errors import TrainsimError, warn
from trainsim.profile import require_torch
from trainsim.workload.layers import embedding_work, head_work, layer_work, shard_of
from trainsim.workload.ops import ComputeOp, GemmLayout, attention, gemm

if TYPE_CHECKING:
    from trainsim.spec.job import Job

Progress = Callable[[int, int, str], None]

DEFAULT_GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
DEFAULT_ATTN_SEQ_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
DEFAULT_ATTN_BATCH_HEADS = (8, 16, 32, 64, 128)
DEFAULT_ATTN_HEAD_DIMS = (64, 128)
GEMM_LAYOUTS = ("fwd", "dgrad", "wgrad")
OPTIMIZER_DTYPES = ("fp32", "bf16", "fp16")


def torch_device(device: str) -> Any:
    """A ``torch.device`` for ``cpu``, ``cuda`` or ``cuda:N``, checked to be usable."""
    torch = require_torch()
    if device != "cpu" and not device.startswith("cuda"):
        raise TrainsimError("device", f"unknown device {device!r}", "use cuda, cuda:N or cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TrainsimError("device", "CUDA is not available to PyTorch here",
                            "use --device cpu, or install a CUDA build of PyTorch on a GPU machine")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise TrainsimError("device", f"bad device {device!r} ({exc})", "use cuda, cuda:N or cpu") from None
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise TrainsimError("device", f"{device} does not exist ({torch.cuda.device_count()} GPUs)",
                            "choose an existing GPU")
    return dev


def job_operators(job: Job) -> list[tuple[ComputeOp, str]]:
    """Distinct operators of one GPU of ``job`` (first occurrence of each key) with their role.

    Role: ``fwd`` or ``bwd`` by phase; ``recompute`` for a recomputed op that has no forward twin.
    """
    shard = shard_of(job)
    works = [layer_work(job.model, shard, False)]
    if job.model.is_moe:
        works.append(layer_work(job.model, shard, True))
    works += [embedding_work(job.model, shard), head_work(job.model, shard)]
    seen: set[tuple[object, ...]] = set()
    out: list[tuple[ComputeOp, str]] = []
    for work in works:
        for ops, role in ((work.fwd, None), (work.bwd, None), (work.recompute, "recompute")):
            for op in ops:
                if op.key in seen:
                    continue
                seen.add(op.key)
                out.append((op, role or op.phase))
    return out


def _time_op(op: ComputeOp, ctx: Any, timing: dict[str, Any]) -> dict[str, Any] | None:
    torch = require_torch()
    from trainsim.profile.builders import build
    from trainsim.profile.timing import measure

    previous = torch.get_float32_matmul_precision()
    try:
        built = build(op, ctx)
        if built.matmul_precision:
            torch.set_float32_matmul_precision(built.matmul_precision)
        stats = measure(built.fn, ctx.device, **timing)
    except torch.cuda.OutOfMemoryError:
        warn("profile", f"{op.name} ({op.phase}) does not fit in GPU memory; left to the analytic model")
        torch.cuda.empty_cache()
        return None
    finally:
        torch.set_float32_matmul_precision(previous)
    return {
        "time_s": stats.median, "time_mean_s": stats.mean, "time_std_s": stats.std, "time_min_s": stats.min,
        "time_max_s": stats.max, "repetitions": stats.repetitions, "inner": stats.inner, "warmup": stats.warmup,
        "builder": built.builder, "backend": built.backend,
    }


def _run(items: Sequence[tuple[ComputeOp, str, Any, str]], info: dict[str, Any], timing: dict[str, Any],
         progress: Progress | None, model_name: str) -> list[dict[str, Any]]:
    rows = []
    for i, (op, role, ctx, source) in enumerate(items):
        if progress is not None:
            progress(i, len(items), f"{op.name} ({op.phase})")
        timed = _time_op(op, ctx, timing)
        if timed is None:
            continue
        rows.append({**op_key_columns(op), "role": role, "params": 0, "source": source, "model": model_name,
                     **timed, **info})
    if progress is not None:
        progress(len(items), len(items), "done")
    return rows


def _timing(warmup: int, reps: int, min_rep_s: float | None, min_warmup_s: float) -> dict[str, Any]:
    if reps < 1:
        raise TrainsimError("reps", "must be at least 1", "give --reps 5 or more")
    if warmup < 0:
        raise TrainsimError("warmup", "must not be negative", "give --warmup 0 or more")
    if min_warmup_s < 0 or (min_rep_s is not None and min_rep_s < 0):
        raise TrainsimError("min_warmup_ms", "times must not be negative", "give 0 or more")
    return {"warmup": warmup, "reps": reps, "min_rep_s": min_rep_s, "min_warmup_s": min_warmup_s}


def _setup(device: str, threads: int | None, seed: int) -> Any:
    torch = require_torch()
    dev = torch_device(device)
    if threads is not None:
        if threads < 1:
            raise TrainsimError("threads", "must be at least 1", "give --threads 1 or more")
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return dev


def profile_job(job: Job, device: str = "cuda", *, warmup: int = 3, reps: int = 10, min_rep_s: float | None = None,
                min_warmup_s: float = 0.05, attention_backend: str = "auto", optimizer: bool = True,
                optimizer_dtype: str = "fp32", gpu_name: str | None = None, threads: int | None = None,
                progress: Progress | None = None, seed: int = 0) -> pd.DataFrame:
    """Measure the necessary operators of one GPU of ``job`` (and the optimizer step) on ``device``.

    ``optimizer_dtype`` is the type of the parameters and Adam states stepped: ``fp32`` (Megatron's master weights,
    the default) or the 16-bit type of a model trained without master weights. ``threads`` sets PyTorch's CPU
    threads (the table records the number used). Timing: see :func:`trainsim.profile.timing.measure`.
    """
    require_torch()
    from trainsim.profile.builders import OpContext, build_optimizer_step, layer_parameter_shapes
    from trainsim.profile.env import device_info
    from trainsim.profile.timing import measure

    timing = _timing(warmup, reps, min_rep_s, min_warmup_s)
    if optimizer_dtype not in OPTIMIZER_DTYPES:
        raise TrainsimError("optimizer_dtype", f"unknown type {optimizer_dtype!r}",
                            f"use {', '.join(OPTIMIZER_DTYPES)}")
    dev = _setup(device, threads, seed)
    info = device_info(dev, gpu_name)
    shard = shard_of(job)
    ctx = OpContext(dev, job.model, shard, attention_backend)
    items = [(op, role, ctx, "layer") for op, role in job_operators(job)]
    rows = _run(items, info, timing, progress, job.model.name)
    if optimizer:
        built, params = build_optimizer_step(ctx, optimizer_dtype, layer_parameter_shapes(job.model, shard))
        stats = measure(built.fn, dev, **timing)
        rows.append({"name": "optimizer_step", "phase": "step", "kind": "optimizer", "dtype": optimizer_dtype,
                     "role": "optimizer", "params": params, "flops": 0.0, "source": "layer", "model": job.model.name,
                     "time_s": stats.median, "time_mean_s": stats.mean, "time_std_s": stats.std,
                     "time_min_s": stats.min, "time_max_s": stats.max, "repetitions": stats.repetitions,
                     "inner": stats.inner, "warmup": stats.warmup, "builder": built.builder, "backend": "", **info})
    return normalize(pd.DataFrame(rows), "ops")


def sweep_operators(dtypes: Iterable[str] = ("bf16",), gemm_sizes: Iterable[int] = DEFAULT_GEMM_SIZES,
                    layouts: Iterable[str] = GEMM_LAYOUTS, attn_seq_lengths: Iterable[int] = DEFAULT_ATTN_SEQ_LENGTHS,
                    attn_batch_heads: Iterable[int] = DEFAULT_ATTN_BATCH_HEADS,
                    attn_head_dims: Iterable[int] = DEFAULT_ATTN_HEAD_DIMS,
                    attn_causal: Iterable[bool] = (True, False)) -> list[ComputeOp]:
    """The GEMM and self-attention operators of a sweep (a full grid per data type and layout)."""
    sizes = sorted(set(gemm_sizes))
    layouts = list(layouts)
    for lay in layouts:
        if lay not in GEMM_LAYOUTS:
            raise TrainsimError("sweep_layouts", f"unknown layout {lay!r}", f"use {', '.join(GEMM_LAYOUTS)}")
    if any(s < 1 for s in sizes):
        raise TrainsimError("gemm_sizes", "sizes must be positive", "e.g. --gemm-sizes 256,1024,4096")
    ops: list[ComputeOp] = []
    for dtype in dtypes:
        for lay in layouts:
            name, phase = ("sweep_gemm", "fwd") if lay == "fwd" else (f"sweep_gemm_{lay}", "bwd")
            for m, n, k in itertools.product(sizes, sizes, sizes):
                ops.append(gemm(name, phase, m, n, k, dtype, layout=GemmLayout(lay)))  # type: ignore[arg-type]
        attn_dtype = {"fp16": "fp16", "fp32": "fp32", "tf32": "fp32"}.get(dtype, "bf16")  # FP8 runs bf16 attention
        for d, causal, bh, s in itertools.product(sorted(set(attn_head_dims)), list(attn_causal),
                                                  sorted(set(attn_batch_heads)), sorted(set(attn_seq_lengths))):
            for phase, name in (("fwd", "sweep_attn"), ("bwd", "sweep_attn_grad")):
                ops.append(attention(name, phase, 1, bh, s, s, d, causal, attn_dtype))  # type: ignore[arg-type]
    return ops


def profile_sweep(device: str = "cuda", *, dtypes: Sequence[str] = ("bf16",),
                  gemm_sizes: Iterable[int] = DEFAULT_GEMM_SIZES, layouts: Iterable[str] = GEMM_LAYOUTS,
                  attn_seq_lengths: Iterable[int] = DEFAULT_ATTN_SEQ_LENGTHS,
                  attn_batch_heads: Iterable[int] = DEFAULT_ATTN_BATCH_HEADS,
                  attn_head_dims: Iterable[int] = DEFAULT_ATTN_HEAD_DIMS, attn_causal: Iterable[bool] = (True, False),
                  job: Job | None = None, seq_lengths: Sequence[int] = (), micro_batch_sizes: Sequence[int] = (),
                  warmup: int = 2, reps: int = 5, min_rep_s: float | None = None, min_warmup_s: float = 0.05,
                  attention_backend: str = "auto", gpu_name: str | None = None, threads: int | None = None,
                  progress: Progress | None = None, seed: int = 0) -> pd.DataFrame:
    """A sweep table: GEMM and attention grids and, with ``job``, its layer at other sequence lengths and
    micro-batch sizes (which lets elementwise kernels interpolate in size)."""
    require_torch()
    from trainsim.profile.builders import OpContext
    from trainsim.profile.env import device_info

    timing = _timing(warmup, reps, min_rep_s, min_warmup_s)
    dev = _setup(device, threads, seed)
    info = device_info(dev, gpu_name)
    ctx = OpContext(dev, None, None, attention_backend)
    ops = sweep_operators(dtypes, gemm_sizes, layouts, attn_seq_lengths, attn_batch_heads, attn_head_dims,
                          attn_causal)
    items: list[tuple[ComputeOp, str, Any, str]] = [(op, op.phase, ctx, "sweep") for op in ops]
    if job is not None:
        seen: set[tuple[object, ...]] = set()
        for seq, mbs in itertools.product(seq_lengths or [job.seq_length],
                                          micro_batch_sizes or [job.training.micro_batch_size]):
            variant = job.replace(training=job.training.replace(seq_length=seq, micro_batch_size=mbs,
                                                                global_batch_size=mbs * job.dp))
            vctx = OpContext(dev, job.model, shard_of(variant), attention_backend)
            for op, role in job_operators(variant):
                if op.key not in seen:
                    seen.add(op.key)
                    items.append((op, role, vctx, "layer"))
    rows = _run(items, info, timing, progress, job.model.name if job is not None else "")
    return normalize(pd.DataFrame(rows), "ops")
