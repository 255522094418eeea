import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_single_gpu.py"


def test_validation_script_predicts_a_cpu_training_step_from_its_own_profile(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("validate_single_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--device", "cpu", "--layers", "1", "--hidden", "64", "--heads", "4", "--vocab", "256",
                          "--seq", "32", "--mbs", "2", "--steps", "2", "--warmup-steps", "1", "--reps", "2",
                          "--threads", "1", "--profile-arg=--min-warmup-ms=0", "--profile-arg=--warmup=1",
                          "--profile-arg=--min-rep-ms=0.2",
                          "--out", str(tmp_path)])
    assert json.loads((tmp_path / "results.json").read_text()) == result
    assert result["measured"]["step_s"] > 0 and result["measured"]["params"] > 0
    assert result["measured_compute_fraction"] == pytest.approx(1.0)
    for key in ("predicted_measured_tables_s", "predicted_analytic_s"):
        assert math.isfinite(result[key]) and result[key] > 0
    assert result["breakdown_measured_tables_s"]["other"] == 0.0  # iteration overhead zeroed for a bare loop
    assert (tmp_path / "ops.parquet").exists() and (tmp_path / "system-cpu.yaml").exists()
    assert "predict --op-costs" in capsys.readouterr().out
