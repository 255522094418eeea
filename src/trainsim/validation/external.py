"""Published training runs outside the calibration data, predicted with the shipped constants (never fitted).

``trainsim/data/public/llm_foundry_benchmarks.csv``: MosaicML llm-foundry's MPT benchmark tables (FSDP);
``llm_foundry_more.csv``: every other row of those four tables (H100 BF16 and FP8, A100 80GB and 40GB; 8-128 GPUs,
sequences of 512 to 65,536 tokens);
``megatron_bridge_25_11.csv``: Megatron-Bridge's 25.11 performance summary (GB300, GB200, B200, H100; dense and
mixture-of-experts); ``nemo_25_02_04.csv``: the NeMo 25.02 (DGX-B200) and 25.04 (DGX-GB200) performance summaries;
``torchtitan_a100.csv``: torchtitan's FSDP2 numbers on 64 A100; ``torchtitan_h100.csv``: its December 2024 1D-4D
benchmarks on Meta's 500 W HBM2e H100 (Grand Teton); ``megatron_moe_modelzoo.csv``: the Megatron-Core MoE
team's Qwen3-235B runs on 256 H100 (DeepEP and all-to-all dispatchers); see the folder's README.
docs/VALIDATION.md shows them in the section "Held-out published runs".
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from trainsim.spec.job import Job
from trainsim.validation.measurements import load_table

EXTERNAL_FILES = ("llm_foundry_benchmarks.csv", "llm_foundry_more.csv", "megatron_bridge_25_11.csv",
                  "megatron_moe_modelzoo.csv", "nemo_25_02_04.csv", "torchtitan_a100.csv", "torchtitan_h100.csv")


def external_path(name: str) -> Path:
    """Path of a packaged external measurement file."""
    return Path(str(resources.files("trainsim") / "data" / "public" / name))


def external_lines() -> list[str]:
    """The "Held-out published runs" section: per file, the error of every row, its MAPE and worst row, and
    whether every real run is predicted to fit."""
    from trainsim.validation.report import run_validation

    lines = [
        "## Held-out published runs (outside measurements.csv, never fitted)",
        "",
        "Published runs of other stacks predicted with the shipped constants (`trainsim/data/public`, provenance in",
        "its README; `trainsim validate --measurements PATH` prints the same comparison).",
        "",
    ]
    pooled: list[tuple[Job, float]] = []
    for name in EXTERNAL_FILES:
        path = external_path(name)
        report = run_validation(measurements=path)
        jobs = {m.id: m.job for m in load_table(path).rows}
        pooled += [(jobs[r.id], r.error) for r in report.rows]
        unfit = [r.id for r in report.rows if not r.fits]
        kinds = [(kind, [abs(r.error) for r in report.rows if jobs[r.id].model.is_moe == moe])
                 for kind, moe in (("dense", False), ("mixture-of-experts", True))]
        split = "; ".join(f"{kind} {len(e)}: MAPE {100 * sum(e) / len(e):.1f} %, worst {100 * max(e):.1f} %"
                          for kind, e in kinds if e)
        lines += [
            f"**`{name}`**: {len(report.rows)} runs ({', '.join(report.frameworks())}) — {split}; "
            + (f"predicted out of memory: {', '.join(unfit)}" if unfit else "every run predicted to fit") + "; "
            + (f"not predicted: {len(report.skipped)} (below)" if report.skipped else "every row predicted") + ".",
            "",
            "| id | model | GPUs | GPU | measured s | predicted s | error | peak GB |",
            "|---|---|---:|---|---:|---:|---:|---:|",
        ]
        for r in report.rows:
            job = jobs[r.id]
            lines.append(f"| {r.id} | {job.model.name} | {job.num_gpus} | {job.system.gpu.name} | {r.measured_s:.3f} | "
                         f"{r.predicted_s:.3f} | {100 * r.error:+.1f}% | {r.peak_memory_gb:.1f} |")
        lines.append("")
        lines += [f"- `{k.id}` not predicted: {k.reason}" for k in report.skipped]
        if report.skipped:
            lines.append("")
    return lines + bias_lines(pooled)


def _kind(job: Job) -> tuple[str, str, str]:
    """(GPU generation, the linear layers' arithmetic, dense or MoE) of a job, the axes of :func:`bias_lines`."""
    from trainsim.workload.layers import shard_of

    return job.system.gpu.generation, shard_of(job).gemm_dtype, "MoE" if job.model.is_moe else "dense"


def bias_lines(pooled: list[tuple[Job, float]]) -> list[str]:
    """Signed error of the held-out runs pooled over the files, by GPU generation, arithmetic and model kind: where
    the model is biased (a column of one sign) rather than noisy, for the reader deciding what to trust."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for job, error in pooled:
        groups.setdefault(_kind(job), []).append(error)
    lines = [
        "**All held-out runs above by GPU generation, arithmetic and model kind** (mean signed error: negative is a",
        "prediction faster than measured):",
        "",
        "| generation | arithmetic | kind | runs | mean error | MAPE | worst |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for (gen, arith, kind), errors in sorted(groups.items()):
        n = len(errors)
        worst = max(errors, key=abs)
        lines.append(f"| {gen} | {arith} | {kind} | {n} | {100 * sum(errors) / n:+.1f}% | "
                     f"{100 * sum(map(abs, errors)) / n:.1f}% | {100 * worst:+.1f}% |")
    return [*lines, ""]
