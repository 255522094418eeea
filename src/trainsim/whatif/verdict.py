"""The dominant root cause of a job's slowdown, by a documented rule over the what-if signals.

Rule (first match wins):

1. ``none`` when the slowdown ``S`` is below ``min_slowdown`` (default 1.05: less than ~5 % of GPU time is
   lost);
2. ``worker`` when the worst ~3 % of workers explain at least ``share_threshold`` (default 0.5) of the
   slowdown (``M_W``): a few machines are slow; replace or repair them;
3. ``sequence-imbalance`` when forward times vary within a rank by a coefficient of variation of at least
   ``cv_threshold`` (default 0.05) and forward/backward times of the same micro-batch correlate by at least
   ``correlation_threshold`` (default 0.5): micro-batches carry different amounts of work (variable sequence
   lengths); balance the micro-batches;
4. ``last-stage`` when the last pipeline stage explains at least ``share_threshold`` of the slowdown
   (``M_S``): the stage partitioning is unbalanced (the loss layer sits on the last stage); repartition the
   layers;
5. ``none`` otherwise: the slowdown is spread with no dominant cause.

Worker problems are checked first because they are the most actionable and, since a slow machine slows all its
micro-batches alike, do not show the within-rank variability of sequence imbalance. Sequence imbalance comes
before the last stage because long sequences also lengthen the last stage (which computes the loss), inflating
``M_S``.
"""

from __future__ import annotations

import dataclasses

VERDICTS: tuple[str, ...] = ("worker", "last-stage", "sequence-imbalance", "none")


@dataclasses.dataclass(frozen=True)
class VerdictRule:
    """Thresholds of the verdict rule (see the module docstring)."""

    min_slowdown: float = 1.05
    share_threshold: float = 0.5
    cv_threshold: float = 0.05
    correlation_threshold: float = 0.5


def decide(
    slowdown: float,
    worker_share: float | None,
    last_stage_share: float | None,
    forward_cv: float | None,
    correlation: float | None,
    rule: VerdictRule | None = None,
) -> tuple[str, str]:
    """Return ``(verdict, reason)``; the reason quotes the signals that decided."""
    r = rule or VerdictRule()
    if slowdown < r.min_slowdown:
        return "none", f"slowdown S={slowdown:.3f} < {r.min_slowdown}: stragglers cost little"
    if worker_share is not None and worker_share >= r.share_threshold:
        return "worker", f"the worst ~3% of workers explain M_W={worker_share:.0%} of the slowdown"
    if (
        forward_cv is not None
        and correlation is not None
        and forward_cv >= r.cv_threshold
        and correlation >= r.correlation_threshold
    ):
        return (
            "sequence-imbalance",
            f"forward time varies by CV={forward_cv:.2f} within a rank and forward/backward "
            f"times correlate ({correlation:.2f}): micro-batches carry unequal work",
        )
    if last_stage_share is not None and last_stage_share >= r.share_threshold:
        return "last-stage", f"the last stage explains M_S={last_stage_share:.0%} of the slowdown"
    return "none", (
        f"S={slowdown:.3f} but no dominant cause (M_W={_pct(worker_share)}, M_S={_pct(last_stage_share)},"
        f" forward CV={_num(forward_cv)})"
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"
