"""Compare predictions with the published measurements and write ``docs/VALIDATION.md``.

``trainsim validate`` reruns the comparison with the packaged calibration; ``trainsim calibrate`` refits the constants
first (and writes ``presets/calibration.yaml``). The report also gives a leave-one-source-out check: for each source,
the constants are refitted on the *other* sources of the same GPU generation and the held-out source is predicted,
which estimates the error on published runs the fit has not seen.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import yaml

from trainsim.cost.calibration import Calibration, calibration_for
from trainsim.cost.job_costs import AnalyticCostModel
from trainsim.estimate import BREAKDOWN_KEYS
from trainsim.io.atomic import write_text_atomic
from trainsim.predictor import predict
from trainsim.validation.fit import FIT_PARAMETERS, FitResult, fit_generation, rows_by_generation
from trainsim.validation.measurements import SOURCE_DEFAULTS, Measurement, load_measurements

SOURCE_NAMES = {
    "sc21": "Megatron-LM SC'21 Table 1 (A100, weak scaling)",
    "kort": "Korthikanti et al. 2022 (A100, recompute/SP)",
    "mlm24": "Megatron-Core 2024 README (H100, weak scaling)",
    "nemo2407": "NeMo 24.07 performance summary (H100, FP8)",
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

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def held_out_error(self) -> float | None:
        """Signed relative error when the row's source was left out of the fit."""
        return None if self.held_out_s is None else self.held_out_s / self.measured_s - 1.0


@dataclass
class ValidationReport:
    """All rows, per-source errors and the constants used."""

    rows: list[RowResult]
    calibrations: dict[str, Calibration]
    fits: dict[str, FitResult] = field(default_factory=dict)

    def mape(self, source: str | None = None, held_out: bool = False) -> float:
        """Mean absolute percentage error (as a fraction), overall or for one source."""
        errs = []
        for r in self.rows:
            if source is not None and r.source != source:
                continue
            e = r.held_out_error if held_out else r.error
            if e is not None:
                errs.append(abs(e))
        return sum(errs) / len(errs) if errs else math.nan

    def max_error(self, source: str | None = None) -> float:
        """Largest absolute relative error."""
        return max(abs(r.error) for r in self.rows if source is None or r.source == source)

    def sources(self) -> list[str]:
        """Sources in table order."""
        seen: list[str] = []
        for r in self.rows:
            if r.source not in seen:
                seen.append(r.source)
        return seen


def _held_out(rows: Sequence[Measurement], fitted: dict[str, Calibration]) -> dict[str, float]:
    """Predicted time of each row with its own source left out of the fit."""
    out: dict[str, float] = {}
    for gen, gen_rows in rows_by_generation(rows).items():
        sources = sorted({r.source for r in gen_rows})
        for src in sources:
            train = [r for r in gen_rows if r.source != src]
            test = [r for r in gen_rows if r.source == src]
            if not train:
                continue
            result = fit_generation(train, gen, start=fitted.get(gen))
            for r in test:
                model = AnalyticCostModel(r.job.system, result.calibration, r.job.num_nodes)
                out[r.id] = predict(r.job, cost_model=model).iteration_time_s
    return out


def run_validation(refit: bool = False, held_out: bool = True) -> ValidationReport:
    """Predict every published row (optionally refitting the constants first)."""
    rows = load_measurements()
    fits: dict[str, FitResult] = {}
    calibs: dict[str, Calibration] = {}
    for gen, gen_rows in rows_by_generation(rows).items():
        if refit:
            fits[gen] = fit_generation(gen_rows, gen)
            calibs[gen] = fits[gen].calibration
        else:
            calibs[gen] = calibration_for(gen)
    results = []
    for r in rows:
        calib = calibs[r.job.system.gpu.generation]
        p = predict(r.job, cost_model=AnalyticCostModel(r.job.system, calib, r.job.num_nodes))
        results.append(RowResult(r.id, r.source, r.measured_iter_s, p.iteration_time_s, p.mfu, p.memory.fits,
                                 p.memory.peak_bytes / 1e9, breakdown=dict(p.breakdown_s)))
    if held_out:
        ho = _held_out(rows, calibs)
        for res in results:
            res.held_out_s = ho.get(res.id)
    return ValidationReport(results, calibs, fits)


def write_calibration(report: ValidationReport, path: Path) -> None:
    """Write fitted constants to a calibration YAML (the packaged ``presets/calibration.yaml``)."""
    data: dict[str, object] = {"default": {}}
    for gen, calib in sorted(report.calibrations.items()):
        names = FIT_PARAMETERS.get(gen, ())
        data[gen] = {n: float(f"{getattr(calib, n):.6g}") for n in names}
    header = ("# Analytic-model constants per GPU generation, fitted by `trainsim calibrate` on\n"
              "# trainsim/data/published/measurements.csv only (see docs/VALIDATION.md). Constants not listed keep\n"
              "# the documented defaults of trainsim.cost.calibration.Calibration.\n")
    write_text_atomic(path, header + yaml.safe_dump(data, sort_keys=True))


def _pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+.1f}%"


def render_markdown(report: ValidationReport) -> str:
    """The docs/VALIDATION.md text."""
    lines = [
        "# Validation of the analytic model",
        "",
        "Generated by `trainsim validate --write docs/VALIDATION.md` "
        f"(trainsim, Python {platform.python_version()}, {date.today().isoformat()}). Do not edit by hand.",
        "",
        "Every row of `trainsim/data/published/measurements.csv` (a copy of `shared/data/published/measurements.csv`,",
        "the only published data the constants are fitted on) is predicted with `trainsim.predict` and compared with",
        "the measured iteration time. *held-out* is the prediction when the row's own source is left out of the fit",
        "(constants refitted on the other source of the same GPU generation): an estimate of the error on published",
        "runs the fit has not seen.",
        "",
        "## Accuracy per source",
        "",
        "| source | rows | MAPE | max abs error | held-out MAPE |",
        "|---|---:|---:|---:|---:|",
    ]
    for src in report.sources():
        n = sum(1 for r in report.rows if r.source == src)
        lines.append(f"| {SOURCE_NAMES.get(src, src)} | {n} | {report.mape(src) * 100:.1f}% | "
                     f"{report.max_error(src) * 100:.1f}% | {report.mape(src, held_out=True) * 100:.1f}% |")
    lines.append(f"| **all** | {len(report.rows)} | **{report.mape() * 100:.1f}%** | "
                 f"**{report.max_error() * 100:.1f}%** | {report.mape(held_out=True) * 100:.1f}% |")
    fits = sum(1 for r in report.rows if r.fits)
    lines += [
        "",
        f"Memory: every published run ran, so it fitted in 80 GB; the memory model says {fits} of "
        f"{len(report.rows)} fit (rows predicted not to fit are marked below).",
        "",
        "## Fitted constants",
        "",
        "Fractions of the datasheet peak (see `trainsim.cost.calibration`); fitted per GPU generation by "
        "`trainsim calibrate`",
        "(mean squared log error with a weak pull to documented priors). Blackwell has no row and uses Hopper's.",
        "",
    ]
    gens = sorted(report.calibrations)
    names = sorted({n for g in gens for n in FIT_PARAMETERS.get(g, ())})
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
        "| id | measured s | predicted s | error | held-out | MFU | peak mem |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        mem = f"{r.peak_memory_gb:.0f} GB" + ("" if r.fits else " (does not fit)")
        lines.append(f"| {r.id} | {r.measured_s:.3f} | {r.predicted_s:.3f} | {_pct(r.error)} | "
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
        "From `trainsim.validation.measurements.SOURCE_DEFAULTS` (the framework defaults of each source):",
        "",
    ]
    for src, d in SOURCE_DEFAULTS.items():
        items = ", ".join(f"{k}={v}" for k, v in d.items())
        lines.append(f"- **{src}**: {items}")
    lines += [
        "",
        "SC'21 rows whose notes say `DDP impl=torch` overlap the gradient all-reduce with the backward pass.",
        "Models: GPT rows use a GELU 4h MLP with biases, dropout and learned positions; Llama rows",
        "SwiGLU/RMSNorm/rotary; Nemotron squared-ReLU, rotary, no biases, vocabulary 256000; GPT-3 rows of NeMo the",
        "GPT-2 vocabulary (50257).",
        "",
    ]
    return "\n".join(lines)
