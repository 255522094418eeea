"""Compare predictions with measured runs and write ``docs/VALIDATION.md``.

Two sources of truth, both fitted on and nothing else: the published runs of
``trainsim/data/published/measurements.csv`` and the single-H100 training steps measured for this project
(``trainsim/data/gpu-h100``, source ``h100``; time and peak memory). Every row is predicted with its own framework
profile. ``trainsim validate`` reruns the comparison with the packaged calibration; ``trainsim calibrate`` refits the
constants first (and writes ``presets/calibration.yaml``). Reported per source and per framework: MAPE, max error,
leave-one-source-out error (constants refitted on the *other* sources of the same GPU generation: an estimate of the
error on runs the fit has not seen), and, within every group of runs of the same model, the Spearman rank correlation
and the top-1 regret of the predicted cost per token (:mod:`trainsim.validation.ranking`).

``run_validation(measurements=PATH)`` (``trainsim validate --measurements PATH``) predicts the rows of any CSV or
Parquet file in the schema of the published table instead, with the shipped constants: the fit never sees them, so
their error is already out of sample, and neither refits nor held-out refits are run on them (asking for either is a
:class:`~trainsim.errors.TrainsimError`). Rows that cannot be predicted are listed with their reason
(``ValidationReport.skipped``); rows predicted not to fit in memory are flagged (``ValidationReport.unfit``).
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from trainsim.cost.calibration import Calibration, calibration_for
from trainsim.cost.job_costs import default_cost_model
from trainsim.errors import TrainsimError
from trainsim.estimate import BREAKDOWN_KEYS
from trainsim.io.atomic import write_text_atomic
from trainsim.predictor import predict
from trainsim.spec.framework import list_frameworks, load_framework
from trainsim.spec.job import Job
from trainsim.spec.training import Recompute
from trainsim.validation.fit import FIT_PARAMETERS, FitResult, fit_generation, rows_by_generation
from trainsim.validation.h100 import H100Run, h100_measurements, load_h100_runs, load_h200_runs
from trainsim.validation.measurements import SOURCE_DEFAULTS, Measurement, SkippedRow, load_measurements, load_table
from trainsim.validation.ranking import GroupRanking, rank_groups
from trainsim.validation.row_rules import (
    DEEPSPEED_2021_LAST_YEAR,
    EQ3_FRAMEWORKS,
    FALLBACK_FRAMEWORK,
    FRAMEWORK_KEYWORDS,
    LLM_FOUNDRY_TRITON_LAST_YEAR,
    SOURCE_CONVENTIONS,
    SYSTEM_FOR_GPU_KEY,
    TORCHTITAN_FUSED_NORM_LAST_YEAR,
    TRANSFORMERS_EAGER_LAST_YEAR,
    notes_flag_names,
)
from trainsim.validation.rows import FRAMEWORK_ROW_DEFAULTS, ROW_DEFAULTS

SOURCE_NAMES = {
    "sc21": "Megatron-LM SC'21 Table 1 (A100, weak scaling)",
    "kort": "Korthikanti et al. 2022 (A100, recompute/SP)",
    "mlm24": "Megatron-Core 2024 README (H100, weak scaling)",
    "nemo2407": "NeMo 24.07 performance summary (H100, FP8)",
    "h100": "Single-H100 steps measured for trainsim (gpu-h100)",
}


@dataclass
class RowResult:
    """One row: measured vs predicted."""

    id: str
    source: str
    measured_s: float
    predicted_s: float
    mfu: float
    fits: bool
    peak_memory_gb: float
    held_out_s: float | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    framework: str = ""
    model_key: str = ""
    gpu_seconds_per_token: float = 1.0  # measured iteration time x GPUs / tokens, over the measured time
    allocated_gb: float = 0.0  # predicted peak of tensor allocations (StageMemory.allocated_bytes)
    measured_memory_gb: float | None = None  # measured peak allocation (h100 rows whose peak is their own)
    baseline_s: float | None = None  # one implicit stack: megatron-core profile, analytic kernels
    baseline_memory_gb: float | None = None
    tight: bool = False  # fits within 10 % of the capacity (trainsim.workload.memory.device_peak)
    assumptions: tuple[str, ...] = ()  # how the row's empty cells were filled (Measurement.assumptions)

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def held_out_error(self) -> float | None:
        """Signed relative error when the row's source was left out of the fit."""
        return None if self.held_out_s is None else self.held_out_s / self.measured_s - 1.0

    @property
    def memory_error(self) -> float | None:
        """Signed relative error of the predicted peak allocation vs the measured one (where measured)."""
        if self.measured_memory_gb is None:
            return None
        return self.allocated_gb / self.measured_memory_gb - 1.0


Selector = Callable[[RowResult], bool]


@dataclass
class ValidationReport:
    """All rows, per-source and per-framework errors, ranking quality and the constants used."""

    rows: list[RowResult]
    calibrations: dict[str, Calibration]
    fits: dict[str, FitResult] = field(default_factory=dict)
    skipped: list[SkippedRow] = field(default_factory=list)  # rows that could not be predicted, with the reason
    measurements_path: str | None = None  # None: the packaged published table (+ the single-H100 steps)
    held_out_gpu: list[RowResult] = field(default_factory=list)  # single-H200 steps: predicted, never fitted

    def _pick(self, source: str | None, framework: str | None) -> list[RowResult]:
        return [r for r in self.rows if (source is None or r.source == source)
                and (framework is None or r.framework == framework)]

    def mape(self, source: str | None = None, held_out: bool = False, framework: str | None = None) -> float:
        """Mean absolute percentage error (as a fraction), overall, for one source or one framework."""
        errs = []
        for r in self._pick(source, framework):
            e = r.held_out_error if held_out else r.error
            if e is not None:
                errs.append(abs(e))
        return sum(errs) / len(errs) if errs else math.nan

    def max_error(self, source: str | None = None, framework: str | None = None) -> float:
        """Largest absolute relative error."""
        rows = self._pick(source, framework)
        return max(abs(r.error) for r in rows) if rows else math.nan

    def rankings(self, source: str | None = None, framework: str | None = None) -> list[GroupRanking]:
        """Ranking quality within each group of runs of the same model."""
        return rank_groups([(r.source, r.model_key, r.gpu_seconds_per_token,
                             r.gpu_seconds_per_token * r.predicted_s / r.measured_s)
                            for r in self._pick(source, framework)])

    def spearman(self, source: str | None = None, framework: str | None = None) -> float:
        """Mean Spearman correlation over the groups (NaN without a group of two or more runs)."""
        vals = [g.spearman for g in self.rankings(source, framework) if not math.isnan(g.spearman)]
        return sum(vals) / len(vals) if vals else math.nan

    def regret(self, source: str | None = None, framework: str | None = None) -> float:
        """Mean top-1 regret over the groups."""
        vals = [g.regret for g in self.rankings(source, framework)]
        return sum(vals) / len(vals) if vals else math.nan

    def unfit(self) -> list[RowResult]:
        """Measured runs the memory model says do not fit (every one of them ran, so this should be empty)."""
        return [r for r in self.rows if not r.fits]

    def sources(self) -> list[str]:
        """Sources in table order."""
        seen: list[str] = []
        for r in self.rows:
            if r.source not in seen:
                seen.append(r.source)
        return seen

    def frameworks(self) -> list[str]:
        """Framework profiles in table order."""
        seen: list[str] = []
        for r in self.rows:
            if r.framework not in seen:
                seen.append(r.framework)
        return seen


def all_measurements() -> tuple[Measurement, ...]:
    """Every run the constants are fitted on: the published rows and the single-H100 steps."""
    return load_measurements() + h100_measurements()


#: ``progress(done, total, phase)``
Progress = Callable[[int, int, str], None]


def _held_out(rows: Sequence[Measurement], fitted: dict[str, Calibration],
              progress: Progress | None = None) -> dict[str, float]:
    """Predicted time of each row with its own source left out of the fit."""
    out: dict[str, float] = {}
    groups = [(gen, gen_rows, src) for gen, gen_rows in rows_by_generation(rows).items() if gen in FIT_PARAMETERS
              for src in sorted({r.source for r in gen_rows})]
    for k, (gen, gen_rows, src) in enumerate(groups):
        if progress is not None:
            progress(k, len(groups), "held-out refits")
        train = [r for r in gen_rows if r.source != src]
        test = [r for r in gen_rows if r.source == src]
        if not train:
            continue
        result = fit_generation(train, gen, start=fitted.get(gen))
        for r in test:
            model = default_cost_model(r.job, result.calibration)
            out[r.id] = predict(r.job, cost_model=model).iteration_time_s
    if progress is not None:
        progress(len(groups), len(groups), "held-out refits")
    return out


def _model_key(r: Measurement) -> str:
    m = r.job.model
    shape = (m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups, m.ffn_size, m.vocab_size)
    return f"{m.name.split('-full')[0].split('-mbs')[0]} {shape}"


def _predict_row(r: Measurement, calib: Calibration) -> RowResult:
    p = predict(r.job, cost_model=default_cost_model(r.job, calib))
    job = r.job
    allocated = max(s.allocated_bytes for s in p.memory.per_stage)
    return RowResult(r.id, r.source, r.measured_iter_s, p.iteration_time_s, p.mfu, p.memory.fits,
                     p.memory.peak_bytes / 1e9, allocated_gb=allocated / 1e9, breakdown=dict(p.breakdown_s),
                     framework=job.framework.name,
                     model_key=_model_key(r),
                     gpu_seconds_per_token=r.measured_iter_s * job.world_size / job.tokens_per_iteration,
                     tight=p.memory.tight, assumptions=r.assumptions)


def _add_baseline(res: RowResult, r: Measurement, run: Any, calib: Calibration) -> None:
    """The single-H100 row's measured memory and its one-implicit-stack ablation."""
    job = r.job
    if run.memory_comparable:
        res.measured_memory_gb = run.peak_alloc_bytes / 1e9
    unset: dict[str, Any] = dict.fromkeys(("attention", "overlap_grad_reduce", "overlap_param_gather",
                                           "tp_comm_overlap", "grad_reduce_in_fp32", "zero_stage"))
    base_job = type(job)(model=job.model, system=job.system, parallelism=job.parallelism,
                         training=job.training.model_copy(update=unset), num_gpus=job.num_gpus)
    b = predict(base_job, cost_model=default_cost_model(base_job, calib, kernels="analytic"))
    res.baseline_s = b.iteration_time_s
    res.baseline_memory_gb = max(s.allocated_bytes for s in b.memory.per_stage) / 1e9


def _check_file_options(refit: bool, held_out: bool | None) -> None:
    if refit:
        raise TrainsimError("measurements", "the constants are fitted only on the packaged published measurements",
                            "validate the file with the shipped constants (refit=False)")
    if held_out:
        raise TrainsimError("--held-out", "held-out refits apply to the packaged measurements only; the rows of a "
                            "--measurements file are never fitted on, so their error is already out of sample",
                            "drop --held-out")


def run_validation(refit: bool = False, held_out: bool | None = None, progress: Progress | None = None,
                   measurements: str | Path | None = None) -> ValidationReport:
    """Predict every measured row (optionally refitting the constants first).

    ``measurements``: a CSV or Parquet file in the schema of the published table (default: the packaged table and
    the single-H100 steps). A file is predicted with the shipped constants: no refit, no held-out refits
    (``held_out`` defaults to on for the packaged data only). ``progress(done, total, phase)`` is called as fits,
    predictions and held-out refits complete.
    """
    if measurements is not None:
        _check_file_options(refit, held_out)
        table = load_table(measurements)
        rows, skipped = table.rows, list(table.skipped)
    else:
        rows, skipped = all_measurements(), list(load_table().skipped)
    held_out = measurements is None if held_out is None else held_out
    fits: dict[str, FitResult] = {}
    calibs: dict[str, Calibration] = {}
    generations = rows_by_generation(rows)
    for k, (gen, gen_rows) in enumerate(generations.items()):
        if progress is not None and refit:
            progress(k, len(generations), "fits")
        if refit:
            fits[gen] = fit_generation(gen_rows, gen)
            calibs[gen] = fits[gen].calibration
        else:
            calibs[gen] = calibration_for(gen)
    h100 = {f"{r.id}": r for r in load_h100_runs()} if measurements is None else {}
    results = []
    predicted = []
    for k, r in enumerate(rows):
        if progress is not None:
            progress(k, len(rows), "measured runs")
        calib = calibs[r.job.system.gpu.generation]
        try:
            res = _predict_row(r, calib)
        except ValueError as exc:  # a configuration the models refuse: reported with the row, never a crash
            skipped.append(SkippedRow(r.id, r.source, f"prediction failed: {str(exc).splitlines()[0]}"))
            continue
        run = h100.get(r.id)
        if run is not None:
            _add_baseline(res, r, run, calib)
        results.append(res)
        predicted.append(r)
    if progress is not None:
        progress(len(rows), len(rows), "measured runs")
    if held_out:
        ho = _held_out(predicted, calibs, progress)
        for res in results:
            res.held_out_s = ho.get(res.id)
    h200 = [_predict_run(run, calibs) for run in load_h200_runs()] if measurements is None else []
    return ValidationReport(results, calibs, fits, skipped, None if measurements is None else str(measurements),
                            held_out_gpu=h200)


def _predict_run(run: H100Run, calibs: dict[str, Calibration]) -> RowResult:
    """A measured single-GPU step that is not fitted on, predicted with the constants of its GPU generation."""
    gen = run.job.system.gpu.generation
    calib = calibs.get(gen) or calibration_for(gen)
    m = run.measurement()
    res = _predict_row(m, calib)
    _add_baseline(res, m, run, calib)
    return res


def write_calibration(report: ValidationReport, path: Path) -> None:
    """Write fitted constants to a calibration YAML (the packaged ``presets/calibration.yaml``)."""
    data: dict[str, object] = {"default": {}}
    for gen, calib in sorted(report.calibrations.items()):
        names = FIT_PARAMETERS.get(gen, ())
        data[gen] = {n: float(f"{getattr(calib, n):.6g}") for n in names}
    header = ("# Analytic-model constants per GPU generation, fitted by `trainsim calibrate` on\n"
              "# trainsim/data/published/measurements.csv and the single-H100 steps of trainsim/data/gpu-h100\n"
              "# only (see docs/VALIDATION.md). Constants not listed keep the documented defaults of\n"
              "# trainsim.cost.calibration.Calibration.\n")
    write_text_atomic(path, header + yaml.safe_dump(data, sort_keys=True))


def _pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+.1f}%"


def _abs(x: float) -> str:
    return "—" if math.isnan(x) else f"{x * 100:.1f}%"


def _num(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.2f}"


def _nccl_section() -> str:
    """The collective-model comparison with nccl-tests, when the communication model provides one."""
    try:
        from trainsim.validation.nccl_compare import nccl_section  # type: ignore[import-not-found]
    except ImportError:
        return ""
    return str(nccl_section())


def _group_lines(report: ValidationReport, title: str, keys: list[str], by: str) -> list[str]:
    lines = [f"| {title} | rows | MAPE | max abs error | held-out MAPE | Spearman | top-1 regret |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for k in keys:
        kw: dict[str, Any] = {by: k}
        n = len(report._pick(kw.get("source"), kw.get("framework")))
        label = SOURCE_NAMES.get(k, k) if by == "source" else f"`{k}`"
        lines.append(f"| {label} | {n} | {_abs(report.mape(**kw))} | {_abs(report.max_error(**kw))} | "
                     f"{_abs(report.mape(held_out=True, **kw))} | {_num(report.spearman(**kw))} | "
                     f"{_abs(report.regret(**kw))} |")
    lines.append(f"| **all** | {len(report.rows)} | **{_abs(report.mape())}** | **{_abs(report.max_error())}** | "
                 f"{_abs(report.mape(held_out=True))} | {_num(report.spearman())} | {_abs(report.regret())} |")
    return lines


def _intro(report: ValidationReport) -> list[str]:
    if report.measurements_path is not None:
        return [
            "# Validation",
            "",
            f"Generated by `trainsim validate --measurements {report.measurements_path}` (trainsim, Python "
            f"{platform.python_version()}, {date.today().isoformat()}).",
            "",
            "Each row is predicted with `trainsim.predict` under its framework profile, with the shipped constants",
            "(fitted only on the packaged published measurements and the single-H100 steps: these rows are out of",
            "sample, so no held-out refit is run). How every empty cell was filled is listed per row under",
            "*Assumptions per row*; rows that describe no configuration trainsim can predict are listed with their",
            "reason under *Rows not predicted*.",
        ]
    return [
        "# Validation",
        "",
        "Generated by `trainsim validate --write docs/VALIDATION.md` "
        f"(trainsim, Python {platform.python_version()}, {date.today().isoformat()}). Do not edit by hand.",
        "",
        "Two kinds of measured runs, the only data the constants are fitted on: every row of",
        "`trainsim/data/published/measurements.csv` (a copy of `shared/data/published/measurements.csv`) and the",
        "single-H100 training steps measured for this project (`trainsim/data/gpu-h100`, each in a fresh process",
        "by `benchmarks/h100/measure_training.py`). Each row is predicted with `trainsim.predict` under its own",
        "framework profile (`docs/model.md` section 8): Megatron-LM 2021 for SC'21/Korthikanti, Megatron-Core for",
        "the 2024 README, NeMo for NeMo 24.07, `megatron-core-local` and `hf-transformers` for the single-H100 steps",
        "(and the held-out single-H200 steps). Hopper GEMM and",
        "attention kernels come from the measured H100 surfaces (`trainsim.cost.kernel_surfaces`); A100 stays on",
        "the analytic roofline. *held-out* is the prediction when the row's own source is left out of the fit",
        "(constants refitted on the other sources of the same GPU generation). *Spearman* and *top-1 regret* are",
        "computed within every group of runs of the same model, on the GPU-seconds per token (what plan search",
        "ranks); the columns average over the groups (— where a source has no group of two or more runs).",
        "",
        "`trainsim validate --measurements PATH` predicts any other CSV or Parquet file in the same schema (other",
        "sources, GPUs and frameworks) with these constants; the rules that turn its rows into jobs are listed under",
        "*Settings chosen for cells the sources leave empty* below, and rows it cannot predict are reported with",
        "their reason, never dropped.",
    ]


def _single_gpu_lines(rows: Sequence[RowResult]) -> list[str]:
    """Per-run time and memory table of measured single-GPU steps, with its mean errors."""
    lines = ["| run | profile | measured s | predicted s | error | as megatron-core s | error | measured GB | "
             "predicted GB | memory error | as megatron-core GB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mem = "—" if r.measured_memory_gb is None else f"{r.measured_memory_gb:.1f}"
        base = r.baseline_s or math.nan
        lines.append(
            f"| {r.id.split('_', 1)[1]} | `{r.framework}` | {r.measured_s:.3f} | {r.predicted_s:.3f} | "
            f"{_pct(r.error)} | {base:.3f} | {_pct(base / r.measured_s - 1)} | {mem} | {r.allocated_gb:.1f} | "
            f"{_pct(r.memory_error)} | {(r.baseline_memory_gb or math.nan):.1f} |")
    errs = [abs(r.error) for r in rows]
    mems = [abs(e) for r in rows if (e := r.memory_error) is not None]
    return [*lines, "", f"Mean absolute time error {sum(errs) / len(errs) * 100:.1f}% (max {max(errs) * 100:.1f}%); "
            f"memory {sum(mems) / max(len(mems), 1) * 100:.1f}% (max {max(mems, default=0) * 100:.1f}%)."]


def render_markdown(report: ValidationReport) -> str:
    """The docs/VALIDATION.md text (or the report of a ``--measurements`` file)."""
    lines = [
        *_intro(report),
        "",
        "## Accuracy per source",
        "",
        *_group_lines(report, "source", report.sources(), "source"),
        "",
        "## Accuracy per framework profile",
        "",
        *_group_lines(report, "framework", report.frameworks(), "framework"),
    ]
    ranks = report.rankings()
    lines += ["", "## Ranking within groups of runs of the same model", "",
              "| source | model | runs | Spearman | top-1 regret |", "|---|---|---:|---:|---:|"]
    for g in ranks:
        lines.append(f"| {g.source} | {g.model} | {g.runs} | {_num(g.spearman)} | {_abs(g.regret)} |")
    h100 = [r for r in report.rows if r.source == "h100"]
    if h100:
        lines += [
            "",
            "## Single-H100 steps: time and peak memory",
            "",
            "*as megatron-core* is an ablation, not the pre-issue model: the same job predicted as if it ran",
            "Megatron-Core with Transformer Engine and analytic kernels (today's constants), i.e. what a model that",
            "ignores the software stack says. Memory compares the predicted peak",
            "of tensor allocations (the peak without CUDA context, NCCL buffers and allocator reserve) with",
            "`torch.cuda.max_memory_allocated` (GB = 1e9 B), each run measured in a fresh process; *predicted GB* in",
            "the per-row table below is the whole peak that decides whether a plan fits.",
            "",
            *_single_gpu_lines(h100),
        ]
    if report.held_out_gpu:
        lines += [
            "",
            "## Single-H200 steps: held out (never fitted)",
            "",
            "The same configurations measured on one H200 (`trainsim/data/gpu-h200`) and predicted on the `hgx-h200`",
            "preset with the constants above, which never saw them: the H100 kernel surface as the shape model of",
            "another Hopper part, HBM3e bandwidth, and the memory model. Columns as for the H100.",
            "",
            *_single_gpu_lines(report.held_out_gpu),
        ]
    fits = sum(1 for r in report.rows if r.fits)
    tight = [r.id for r in report.rows if r.tight]
    lines += [
        "",
        "## Memory: every measured run must fit",
        "",
        f"Every run ran, so it fitted in its GPU; the memory model says **{fits} of {len(report.rows)} fit**"
        + (f" ({len(tight)} of them *fits, tight*: {', '.join(tight)})" if tight else "") + ".",
        "",
        "A plan fits when what must be resident fits (states, context, NCCL buffers and the activation or",
        "optimizer-step peak); the caching allocator's reserve only makes it tight, since PyTorch releases cached",
        "blocks before it reports out of memory (`trainsim.workload.memory.device_peak`). The fp32 copy of",
        "16-bit gradients exists only during the optimizer step (`main_grad_copy_bytes`). Rows predicted not to",
        "fit are marked below; `tests/validation/test_memory_fits.py` fails if there is one.",
        *_unfit_and_skipped_lines(report),
        "",
        "## Fitted constants",
        "",
        "Per GPU generation, fitted by `trainsim calibrate` (mean squared log error with a weak pull to documented",
        "priors). Values in parentheses are not fitted for that generation. Blackwell has no row and uses Hopper's,",
        "with the measured H100 large-kernel efficiencies in place of the priors (docs/model.md section 7).",
        "",
    ]
    gens = sorted(report.calibrations)
    names = sorted({n for g in gens for n in FIT_PARAMETERS.get(g, ())}) or sorted(
        {n for fitted in FIT_PARAMETERS.values() for n in fitted})  # e.g. a Blackwell-only --measurements file
    lines.append("| constant | " + " | ".join(gens) + " |")
    lines.append("|---|" + "---:|" * len(gens))
    for n in names:
        cells = []
        for g in gens:
            v = getattr(report.calibrations[g], n)
            fitted = n in FIT_PARAMETERS.get(g, ())
            text = f"{v * 1e6:.1f} µs" if n.endswith("_s") and v < 0.01 else (
                f"{v * 1e3:.0f} ms" if n.endswith("_s") else f"{v:.3f}")
            cells.append(text if fitted else f"({text})")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Per row",
        "",
        "| id | profile | measured s | predicted s | error | held-out | MFU | peak mem |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        mem = f"{r.peak_memory_gb:.0f} GB" + (" (fits, tight)" if r.tight else "" if r.fits else " (does not fit)")
        lines.append(f"| {r.id} | `{r.framework}` | {r.measured_s:.3f} | {r.predicted_s:.3f} | {_pct(r.error)} | "
                     f"{_pct(r.held_out_error)} | {r.mfu * 100:.1f}% | {mem} |")
    worst = sorted(report.rows, key=lambda r: -abs(r.error))[:5]
    lines += [
        "",
        "## Largest residuals and where the model puts the time",
        "",
        "Shares of the predicted iteration (exposed time by category). A row whose prediction is dominated by a",
        "category the source does not describe (e.g. data-parallel traffic when the micro-batch size is not stated)",
        "points at an unstated setting rather than at a constant to refit; we do not tune rows individually.",
        "",
        "| id | error | " + " | ".join(k for k in BREAKDOWN_KEYS if k != "other") + " |",
        "|---|---:|" + "---:|" * (len(BREAKDOWN_KEYS) - 1),
    ]
    for r in worst:
        total = sum(r.breakdown.values()) or 1.0
        shares = " | ".join(f"{r.breakdown.get(k, 0.0) / total * 100:.0f}%" for k in BREAKDOWN_KEYS if k != "other")
        lines.append(f"| {r.id} | {_pct(r.error)} | {shares} |")
    lines += [
        "",
        "## Settings chosen for cells the sources leave empty",
        "",
        "From `trainsim.validation.measurements.SOURCE_DEFAULTS` (the framework profile and defaults of each source):",
        "",
    ]
    for src, d in SOURCE_DEFAULTS.items():
        items = ", ".join(f"{k}={v}" for k, v in d.items())
        lines.append(f"- **{src}**: {items}")
    lines += [
        "",
        "SC'21 rows whose notes say `DDP impl=torch` overlap the gradient all-reduce with the backward pass.",
        "Rows with an empty `vpp` whose notes state virtual stages (Korthikanti 175B and 530B: \"interleaved schedule",
        "with 3 virtual stages\", from a secondary transcription of the paper) run the interleaved schedule.",
        "Models: GPT rows use a GELU 4h MLP with biases, dropout and learned positions; Llama rows",
        "SwiGLU/RMSNorm/rotary; Nemotron squared-ReLU, rotary, no biases, vocabulary 256000; GPT-3 rows of NeMo the",
        "GPT-2 vocabulary (50257). Single-GPU rows: the settings of `benchmarks/h100/measure_training.py`",
        "(`trainsim.validation.h100`): transformers' eager attention is the eager fp32 softmax chain, a compiled",
        "model switches the profile's `torch_compile` on.",
        "",
    ]
    lines += generic_rules_lines()
    if report.measurements_path is not None:
        lines += _assumption_lines(report)
        return "\n".join(lines)
    nccl = _nccl_section()
    if nccl:
        lines += [nccl.rstrip(), ""]
    lines += zero3_scale_lines()
    from trainsim.validation.external import external_lines

    lines += external_lines()
    return "\n".join(lines)


def _unfit_and_skipped_lines(report: ValidationReport) -> list[str]:
    """Rows predicted out of memory, and rows not predicted with their reason (nothing when there are none)."""
    lines: list[str] = []
    unfit = report.unfit()
    if unfit:
        lines += ["", f"**Predicted not to fit although they ran** ({len(unfit)}): "
                  + ", ".join(f"{r.id} ({r.peak_memory_gb:.0f} GB)" for r in unfit) + "."]
    if report.skipped:
        lines += ["", "## Rows not predicted", "",
                  "Rows that describe no configuration trainsim can predict, with the reason (not in any error above).",
                  "", "| id | source | reason |", "|---|---|---|"]
        lines += [f"| {r.id} | {r.source} | {r.reason.replace('|', '/')} |" for r in report.skipped]
    return lines


def _assumption_lines(report: ValidationReport) -> list[str]:
    lines = ["## Assumptions per row", "", "| id | profile | assumptions |", "|---|---|---|"]
    for r in report.rows:
        lines.append(f"| {r.id} | `{r.framework}` | {'; '.join(r.assumptions).replace('|', '/')} |")
    lines.append("")
    return lines


def generic_rules_lines() -> list[str]:
    """How rows of other sources (``--measurements``) become jobs: the tables of
    :mod:`trainsim.validation.row_rules` and :mod:`trainsim.validation.rows`, rendered from the data."""
    shipped = list_frameworks()
    rules = [f"  {k}. {r.label} → `{r.framework}`"
             + (f" (`{r.otherwise}` while that profile is not shipped)"
                if r.otherwise and r.framework not in shipped else "")
             + (f" (`{r.extended}` when the row uses TP, PP or CP that `{r.framework}` does not offer)"
                if r.extended else "")
             + (f" (`{r.sharded}` when the row's ZeRO stage is one `{r.framework}` does not offer)"
                if r.sharded else "")
             for k, r in enumerate(FRAMEWORK_KEYWORDS, 1)]
    fw_defaults = "; ".join(f"`{fw}`: " + ", ".join(f"{k}={v}" for k, v in d.items())
                            for fw, d in FRAMEWORK_ROW_DEFAULTS.items())
    gpus = ", ".join(f"{k.upper()} → `{v}`" for k, v in SYSTEM_FOR_GPU_KEY.items())
    return [
        "### Rows of other sources (`trainsim validate --measurements PATH`)",
        "",
        "Rows whose id prefix is not one of the four above (`trainsim.validation.rows`, tables in",
        "`trainsim.validation.row_rules`); every choice is reported with the row (`--json`: `assumptions`).",
        "",
        "- **Framework**: a `framework` column (`NAME[@version]`, or a stack written in words such as `NeMo 25.04`,",
        "  matched by the keywords below) wins; else the first of these keywords found in the `source` text, then in",
        "  the `notes` (case-insensitive; `row_rules.FRAMEWORK_KEYWORDS`):",
        "",
        *rules,
        "",
        "  `megatron-by-year`: the first year in the text, 2021 or earlier → `megatron-lm-2021`; 2022 and 2023 →",
        "  `megatron-lm-2021@3.0` (the legacy `megatron/model` code with its fused kernels and the asynchronous",
        "  input-gradient all-reduce, Megatron-LM's default until Megatron-Core models became it in 2024; also for",
        "  rows naming `--use-legacy-models` or vTrain, whose validation runs used these layers) unless the row",
        "  runs FP8 or names Transformer Engine or `--use-mcore-models`; else `megatron-core`.",
        f"  `deepspeed-by-year`: the first year in the text, {DEEPSPEED_2021_LAST_YEAR} or earlier → `deepspeed@0.3`"
        " (ZeRO-3 before its",
        "  gathers overlapped: each parameter all-gathered on its own after a device synchronize, list collectives),",
        f"  {TRANSFORMERS_EAGER_LAST_YEAR} or earlier → `deepspeed@0.12` (the transformers models of 2022-2023, eager"
        " attention), else `deepspeed`.",
        f"  `fsdp-by-year`: the first year in the text, {TRANSFORMERS_EAGER_LAST_YEAR} or earlier → `fsdp@2.1` (the"
        " transformers models of",
        "  2022-2023, eager attention), else `fsdp`.",
        f"  `torchtitan-by-year`: the first year in the text, {TORCHTITAN_FUSED_NORM_LAST_YEAR} or earlier →"
        " `torchtitan@2024` (the train",
        "  configs' Triton fused RMSNorm, norm_type `fused_rmsnorm`, until August 2024), else `torchtitan`.",
        f"  `llm-foundry-by-year`: the first year in the text, {LLM_FOUNDRY_TRITON_LAST_YEAR} or earlier →"
        " `llm-foundry@0.2` (MPT's ALiBi",
        "  attention on the Triton FlashAttention-1 kernel, until flash-attn 2.4.2 took ALiBi), else `llm-foundry`.",
        f"  `hf-transformers-by-year`: the first year in the text, {TRANSFORMERS_EAGER_LAST_YEAR} or earlier →"
        " `hf-transformers@4.35`",
        "  (eager attention: transformers made SDPA its default in 4.36, December 2023), else `hf-transformers`.",
        "  A year is a four-digit 20xx or a venue's two digits (`SC21`, `MLSys'23`); the source's",
        "  comes before the notes'. A stack that does not offer the row's ZeRO stage (the `zero` cell or one written",
        "  in the notes) yields to the first stack named in the source, then the notes, that does (a source's title",
        "  may name the paper's own system while the notes describe the run's), else to its rule's alternative.",
        f"  No keyword: `{FALLBACK_FRAMEWORK}`, reported as a fallback.",
        "- **Source conventions** (`row_rules.SOURCE_CONVENTIONS`): a setting a named source's own documentation"
        " gives for all of its runs fills the cell a row of that source leaves empty (and the notes do not state): "
        + "; ".join(f"{c.label} → `{c.key}` {c.value} ({c.why})" for c in SOURCE_CONVENTIONS) + ".",
        "- **Megatron arguments in the notes** fill the cells the row leaves empty: "
        + ", ".join(f"`{name}`" for name in notes_flag_names()),
        "  (`--overlap-param-gather` and `--fp8-param-gather` imply the distributed optimizer and `--tp-comm-overlap`",
        "  sequence parallelism, as Megatron's `arguments.py` asserts); virtual pipeline stages written as NeMo's",
        "  `virtual_pipeline_model_parallel_size`, `VPP<n>` / `VP<n>` or in words (interleaved schedule with 3",
        "  virtual stages) fill an empty `vpp` cell (`--num-layers-per-virtual-pipeline-stage k`: L / pp / k); a ZeRO",
        "  stage written in the notes or the source (`ZeRO-3`, `ZeRO stage 2`) fills an empty `zero` cell, and Hugging",
        "  Face's `attn_implementation` (eager, sdpa, flash_attention_2) in the notes selects the attention path.",
        "  CPU optimizer offloading named",
        "  in the notes or source (`offload_optimizer`, ZeRO-Offload, CPU-Adam, optimizer offload, CPU offload) turns",
        "  on `--optimizer-cpu-offload`, parameter offloading (`offload_param`, `offload_params=True`, parameter",
        "  offload; FSDP's CPU offload, which always moves the parameters) `--param-cpu-offload` (ZeRO-3); an empty",
        "  `zero` cell under a stack that would not shard is ZeRO-2 (which ZeRO-Offload builds on), 3 with offloaded",
        "  parameters, then 3 (and offloaded parameters) while the run would not fit; offloading to NVMe",
        "  (ZeRO-Infinity) is reported as not predicted. Activation checkpointing in words",
        "  (`gradient_checkpointing=True`, activation checkpointing, full AC: full; selective AC / selective",
        "  activation checkpointing: selective) fills an empty recompute cell, and torch.compile (`--compile`,",
        "  `compile.enable`) or CUDA graphs (`--enable-cuda-graph`, CUDA graphs) named in the notes switch on the",
        "  profile's `torch_compile` / `cuda_graphs`; hybrid sharding (`HYBRID_SHARD`, HSDP) in the notes or the",
        "  zero cell sets its `sharding_strategy: hybrid`. The flash-attention kernel library named in the",
        "  notes (FlashAttention-2 / `flash_attention_2` / `--use-flash-attn-v2`, FlashAttention-3, cuDNN attention,",
        "  FlashAttention-1 / flash-attn 1.x / `--use-flash-attn-v1` / `--use-flash-attn-triton` / `attn_impl triton`)",
        "  sets the profile's `flash_kernel`; else a PyTorch release named in the notes or source (`PyTorch 2.11`,",
        "  `torch==2.4.1`) decides it for the stacks that attend through SDPA's default backend order ("
        + ", ".join(f"`{n}`" for n in sorted(list_frameworks()) if load_framework(n).transformers_model_code)
        + "): cuDNN from 2.11 on, FlashAttention-2 from 2.2, FlashAttention-1 in 2.0 and 2.1.",
        "  PyTorch FlexAttention (FlexAttn, `attn: flex`) is priced as FlashAttention-2. A recipe's",
        "  `reshard_after_forward: true|false` sets the FSDP2 field of that name and `fp32_upcast: true|false`",
        "  (NeMo AutoModel's MaskedCrossEntropy) the loss on fp32 or on the 16-bit logits (`cross_entropy_impl`).",
        "  FlashAttention named without a version selects the flash path; `--cp-comm-type` and DeepSpeed-Ulysses",
        "  (`Ulysses`, `--ds-sequence-parallel-size`) set the context-parallel communication (`a2a` for Ulysses).",
        "  `--exp-avg-dtype`, `--exp-avg-sq-dtype` and `--main-params-dtype` (Megatron-Core's precision-aware",
        "  optimizer) set the profile's state dtypes; `--pipeline-model-parallel-layout` places the layers (its",
        "  virtual stages give vpp, as Megatron derives it), and a stated layout without an `m` stage means the run",
        "  had no multi-token prediction (a preset's MTP module is dropped). A setting named in a negated clause",
        "  (`no FlashAttention-2`, `without activation checkpointing`, `activation checkpointing not stated`) sets",
        "  nothing, except that recomputation stated as off is none.",
        "- **Empty cells**: " + ", ".join(f"{k}={v}" for k, v in ROW_DEFAULTS.items()) + ";",
        f"  per framework: {fw_defaults}; precision fp16 on a GPU without BF16 tensor cores (Volta).",
        "  `zero`, the overlap flags, the gradient-reduce dtype and the attention path come from the profile",
        "  (`default_zero_stage`: NeMo 1, FSDP and torchtitan 3, the others 0); tp/pp/vpp/cp/ep 1; dp from the",
        "  GPU count. The run ran, so it fit: an unstated ZeRO stage whose profile default would leave it out of",
        "  memory becomes the distributed optimizer (ZeRO-1, no compute cost) where the engine offers it; then an",
        "  unstated recompute becomes the lightest one that fits (selective where attention keeps the s² scores or",
        "  the stack's selective checkpointing is op-level, torchtitan's default; then, on stacks running Megatron's",
        "  checkpointing, for mixture-of-experts or MLA models Megatron-Core's fine-grained `--recompute-modules`,",
        "  cheapest first: `moe_act`, `mla_up_proj`, both; then full recomputation of the fewest layers per model",
        "  chunk that fits (`--recompute-method block --recompute-num-layers N`); then full); a run that still does",
        "  not fit with an unstated stage runs the stack's fully sharded engine (ZeRO-3, Megatron-FSDP, FSDP) where",
        "  the stack offers it (`FSDP = 1`, Megatron-FSDP or `--use-megatron-fsdp` in the notes name it). An",
        "  unstated expert",
        "  parallelism (no `ep` column, no `--expert-model-parallel-size` or `EP<n>` in the notes) is 1 unless a",
        "  mixture-of-experts run would not fit: then the smallest power of two dividing the experts that fits,",
        "  without recomputation if it can. An unstated expert tensor parallelism is Megatron's default (tp) unless",
        "  ep·tp does not divide a stage's GPUs: then 1 (Megatron-Bridge's MoE recipes).",
        "  A `local batch` micro-batch (FSDP, DeepSpeed, Hugging Face, torchtitan: no gradient accumulation unless",
        "  stated) is global_batch / dp in one micro-batch, halved until the run fits. Sequence parallelism is on",
        "  with tp > 1 where the profile's TP always shards the sequence (`tp_shards_sequence`: torchtitan, Meta),",
        "  for mixture-of-experts models with tp > 1 on Megatron-Core stacks, which require it",
        "  (`moe_tp_shards_sequence`), and, when unstated, where the run would not fit without it (it adds no",
        "  communication). A mixture-of-experts name whose shape matches a preset at another depth (a benchmark's",
        "  proxy with fewer layers) takes that preset's architecture at the row's layer count.",
        "  A global batch that is not a multiple of micro_batch·dp: when it holds a whole number of sequences per",
        "  replica, fewer than the stated micro-batch, that number is the micro-batch; else (a batch quoted in round",
        "  tokens, e.g. 2M tokens on 992 GPUs) it runs as the nearest multiple, its measured time scaled by the same",
        "  ratio (compared at the measured throughput).",
        "- **Cells in words**: precision `FP8`/`float8`/`E4M3`, `BF16`/`bfloat16`, `FP16`, `FP32`/`TF32`; `AMP` or",
        "  `mixed` without a type is the framework's 16-bit default; `AMP`/`mixed` (also `amp_bf16`) under a stack",
        "  whose default keeps 16-bit parameters and states (`hf-transformers`) means torch.autocast's fp32",
        "  parameters, gradients and optimizer states. The FP8 recipe from the same cell: `MXFP8`/",
        "  `FP8-MX`, `FP8-CS`/current scaling (tensorwise), blockwise/subchannel/rowwise, delayed/`FP8-DS`; none",
        "  named: the stack's default.",
        f"- **GPU → system**: {gpus};",
        "  an A100 named 40GB has 40 GiB at 1555 GB/s; an H100 named HBM2e, 95/96 GB, 500 W or Grand Teton is",
        "  `grand-teton-h100` (Meta's power-limited part, torchtitan's benchmarks). Other GPUs and PCIe/NVL parts",
        "  are not predicted (listed with the reason). `gpus_per_node`, `nic_per_node` and `nic_gbps` override the",
        "  preset; on an NVL72 system a `gpus_per_node` of 4 is a compute tray of the 72-GPU NVLink domain.",
        "- **Model**: names of state-space / recurrent hybrids (Nemotron-H, Mamba, Jamba, RWKV ...) are not",
        "  predicted (transformer blocks only); a model preset of the same shape (L, h, heads, kv_heads) whose",
        "  family name occurs in the model name gives the architecture (the only way a mixture-of-experts row is",
        "  predicted: the schema has no expert columns); else by name: Nemotron (squared-ReLU, RoPE, no biases,",
        "  vocab 256000), Llama 3 (SwiGLU/RMSNorm/RoPE, untied, no biases, vocab 128256), Llama, Mistral (vocab",
        "  32000), Qwen 2 (QKV biases) / Qwen 3 (QK norm, vocab 151936), Baichuan (Llama-like, ALiBi at 13B, vocab",
        "  125696), BLOOM (ALiBi, vocab 250880), MPT (ALiBi, no biases); a name of no family whose ffn/h is below",
        "  3.75 (a gated MLP) or with fewer KV heads than heads is Llama-like; else GPT (GELU 4h MLP, biases,",
        "  learned positions, tied, vocab 50257; no dropout under `megatron-core`/`nemo`). An empty ffn is 4h, or",
        "  Megatron's SwiGLU default for gated families.",
        "- **Pipeline split** when L does not divide over pp·vpp: `pipeline_layout` or `first_stage_layers` /",
        "  `last_stage_layers` columns; else first/last stage layers stated in the notes; else a stack that splits any",
        "  layer count follows its own rule (`pipeline_layer_split`: DeepSpeed's balanced partition — BLOOM's 70",
        "  layers over 12 stages: eleven of 6 and 4 —, torchtitan's and Meta's split counting the embedding and the",
        "  output as layers); else (Megatron's even split), when L + 2 divides, the embedding and the loss count as",
        "  one layer each (Megatron-Core's `account_for_embedding/loss_in_pipeline_split`: NeMo's 405B recipe); else",
        "  the middle stages take the fewest layers that leave the first and last stages no more, the rest split",
        "  between those two (61 over 16: 4 each, 3 and 2; every count a multiple of vpp); else, interleaved, a",
        "  `--pipeline-model-parallel-layout` weighing the embedding and the loss as one layer each, the L + 2 spread",
        "  as evenly as they go, the extra ones after the first virtual stage (DeepSeek-V3's 61 layers over 2 ranks",
        "  of 4 chunks: 6, 8 × 6, 7); each reported with the row; else not predicted.",
        "- **Measured time**: `measured_iter_s`; else tokens/s per GPU; else TFLOP/s per GPU with the source's",
        "  formula: SC'21 Eq. 3 with the recompute factor (4 with recomputation, else 3) for `sc21` rows and the",
        f"  stacks whose throughput calculators report it ({', '.join(f'`{f}`' for f in sorted(EQ3_FRAMEWORKS))}),",
        "  else the model-FLOP formula of the dataset README (MoE: top-k experts);",
        "  else `measured_mfu` (a percentage when above 1) × the dense 16-bit peak (TF32 for fp32), also for FP8",
        "  runs (MFU is quoted against the 16-bit peak).",
        "",
    ]


#: Sharded data parallelism at scale: the plans ``zero3_scale_lines`` predicts (model preset, seq, GPUs, recompute).
#: One micro-batch of one sequence per GPU (global batch = GPUs), the regime of large sharded runs.
ZERO3_CASES: tuple[tuple[str, int, int, Recompute], ...] = (
    ("llama2-7b", 4096, 128, "none"), ("llama2-7b", 4096, 512, "none"),
    ("llama2-13b", 4096, 128, "none"), ("llama2-13b", 4096, 512, "none"),
    ("llama2-70b", 4096, 1024, "full"), ("llama2-70b", 4096, 2048, "full"),
    ("gpt3-175b", 2048, 1024, "full"), ("gpt3-175b", 2048, 2048, "full"))
ZERO3_FRAMEWORKS = ("fsdp", "deepspeed", "deepspeed@0.3", "torchtitan")
#: Profile overrides that switch the sharded engines' schedule mechanisms off (per-layer gathers one layer ahead,
#: BACKWARD_PRE, per-layer reduce-scatters, no copies): the *mechanisms off* column.
ZERO3_MECHANISMS_OFF = {"gather_granularity": "layer", "prefetch_bucket_params": None, "max_live_params": None,
                        "param_persistence_threshold": None, "bucket_size_params": None, "backward_prefetch": "pre",
                        "limit_all_gathers": True, "all_gather_copy_out": False, "max_reuse_params": None,
                        "gather_device_sync": None, "collective_rank_lists": None}


def _zero3_job(name: str, seq: int, n: int, recompute: Recompute, framework: str,
               overrides: dict[str, Any] | None = None) -> Job:
    from trainsim.spec import Training, load_framework, load_model, load_system

    fw = load_framework(framework)
    return Job(model=load_model(name), system=load_system("dgx-a100"), num_gpus=n,
               framework=fw.replace(**overrides) if overrides else fw,
               training=Training(global_batch_size=n, micro_batch_size=1, seq_length=seq, zero_stage=3,
                                 recompute_granularity=recompute, precision="bf16"))


def zero3_scale_lines() -> list[str]:
    """A table of what the model says for ZeRO-3 / FSDP from 128 to 2,048 A100 (no measurement to compare with)."""
    from trainsim.cost.comm import placements_of
    from trainsim.cost.job_costs import default_cost_model, zero3_layer_comm
    from trainsim.parallel.axes import Group
    from trainsim.workload.sharding import sharding_of

    lines = [
        "## ZeRO-3 / FSDP at scale (predictions, no measured row)",
        "",
        "No row of the fitted data uses a sharded engine; these are the model's predictions for Llama-2 7B/13B on",
        "128-512 and 70B / GPT-3 175B on 1,024-2,048 DGX-A100 GPUs with ZeRO-3 (one sequence per GPU: mbs 1,",
        "global batch = GPUs) under each sharded stack. The per-micro-batch schedule is",
        "`trainsim.cost.sharded.run_pass` (the same for the analytic and the event engine): gather units (a layer",
        "for FSDP1/FSDP2, a sub-module for DeepSpeed, whose tensors under `stage3_param_persistence_threshold`",
        "stay gathered), prefetch by units (FSDP1's `limit_all_gathers`; `backward_prefetch` BACKWARD_POST in",
        "llm-foundry's defaults waits for every backward gather) or by elements (DeepSpeed's",
        "`stage3_prefetch_bucket_size` and `stage3_max_live_parameters`), reduce-scatters per unit or per",
        "`reduce_bucket_size` bucket (the last exposed), FSDP2's copy-in/copy-out on the compute stream, DeepSpeed's",
        "`stage3_max_reuse_distance` (with full recompute a sub-module further than 1e9 elements from its backward",
        "is gathered again), and the compute slowed while collectives overlap it; every collective priced by",
        "`trainsim.cost.nccl` (ring latency growing with the group, the node's NICs shared). `deepspeed@0.3` is",
        "ZeRO-3 as DeepSpeed shipped it in 2021: every parameter tensor its own all-gather and reduce-scatter, a",
        "device synchronize before each gather (nothing overlaps), and list collectives whose per-rank copies the",
        "host dispatches (world size × `host_dispatch_s` per collective). *dp exposed* is the data-parallel time",
        "not hidden by compute; *mechanisms off* the iteration time with these schedule mechanisms switched off",
        "(per-layer gathers one layer ahead, BACKWARD_PRE, per-layer reduce-scatters, no copies, no reuse limit,",
        "no synchronize, flat collectives).",
        "",
        "| model | GPUs | framework | iteration s | tokens/s/GPU | MFU | dp exposed s | gathers/layer | "
        "per-layer gather ms | mechanisms off s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, seq, n, recompute in ZERO3_CASES:
        for fw in ZERO3_FRAMEWORKS:
            job = _zero3_job(name, seq, n, recompute, fw)
            p = predict(job)
            off = predict(_zero3_job(name, seq, n, recompute, fw, ZERO3_MECHANISMS_OFF))
            comm = zero3_layer_comm(job, default_cost_model(job), placements_of(job)[Group.DP_CP],
                                    job.model.num_params, job.model.num_layers)
            gather = "—" if comm is None else f"{comm.gather * 1e3:.1f}"
            lines.append(f"| {name} | {n} | `{fw}` | {p.iteration_time_s:.2f} | {p.tokens_per_s_per_gpu:.0f} | "
                         f"{p.mfu * 100:.1f}% | {p.breakdown_s.get('dp_comm', 0.0):.2f} | "
                         f"{sharding_of(job).collectives_per_layer} | {gather} | {off.iteration_time_s:.2f} |")
    lines.append("")
    return lines
