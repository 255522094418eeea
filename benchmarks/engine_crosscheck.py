"""Event engine vs analytic estimator: the tables of docs/engine.md ("Cross-check with the analytic engine").

Run: python benchmarks/engine_crosscheck.py
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from trainsim.predictor import predict
from trainsim.validation.measurements import load_measurements

ROOT = Path(__file__).resolve().parents[1]


def _preset_examples() -> dict:
    """The preset examples that tests/engine/test_engine.py checks (one list, used by both)."""
    spec = importlib.util.spec_from_file_location("engine_tests", ROOT / "tests" / "engine" / "test_engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PRESETS


def main() -> None:
    print("| job | schedule | measured | analytic | event | event/analytic |")
    print("|---|---|---:|---:|---:|---:|")
    worst = 0.0
    for row in load_measurements():
        a = predict(row.job).iteration_time_s
        e = predict(row.job, engine="event").iteration_time_s
        worst = max(worst, abs(e / a - 1))
        print(f"| {row.id} | {row.job.schedule} | {row.measured_iter_s:.3f} s | {a:.3f} s | {e:.3f} s | "
              f"{(e / a - 1) * 100:+.2f} % |")
    print(f"\nLargest difference on the calibration set: {worst * 100:.2f} %\n")
    print("| example | analytic | event | event/analytic |")
    print("|---|---:|---:|---:|")
    for name, make in sorted(_preset_examples().items()):
        j = make()
        a = predict(j).iteration_time_s
        e = predict(j, engine="event").iteration_time_s
        print(f"| {name} | {a:.3f} s | {e:.3f} s | {(e / a - 1) * 100:+.2f} % |")


if __name__ == "__main__":
    main()
