"""``--kernels auto|measured|analytic`` and ``predict(..., kernels=)``: which kernel model prices GEMMs/attention."""

from __future__ import annotations

import json

import pytest

from cli_helpers import check_one_line_error, run
from trainsim.errors import TrainsimError
from trainsim.predictor import predict
from trainsim.spec import Job, Training, load_model, load_system


def _job(system: str = "dgx-h100") -> Job:
    return Job(model=load_model("llama3-8b"), system=load_system(system), num_gpus=8,
               training=Training(global_batch_size=64, seq_length=4096))


def test_measured_is_the_default_on_h100_and_analytic_elsewhere():
    h100 = predict(_job())
    assert h100.kernels == "measured"
    assert predict(_job(), kernels="measured").iteration_time_s == h100.iteration_time_s
    analytic = predict(_job(), kernels="analytic")
    assert analytic.kernels == "analytic" and analytic.iteration_time_s != h100.iteration_time_s
    assert predict(_job("dgx-a100")).kernels == "analytic"


def test_measured_refused_without_a_surface_and_unknown_names():
    with pytest.raises(TrainsimError, match="no measured kernel surface"):
        predict(_job("dgx-a100"), kernels="measured")
    with pytest.raises(TrainsimError, match="unknown kernel model"):
        predict(_job(), kernels="roofline")


def test_cli_kernels_flag(capsys):
    args = ["predict", "-m", "llama3-8b", "--gbs", "64", "-n", "8", "--json"]
    code, out, err = run([*args, "--kernels", "analytic"], capsys)
    assert code == 0, err
    assert json.loads(out)["kernels"] == "analytic"
    code, out, err = run(args, capsys)
    assert code == 0 and json.loads(out)["kernels"] == "measured"
    code, out, err = run([*args, "-s", "dgx-a100", "--kernels", "measured"], capsys)
    check_one_line_error(code, err, "kernels", "analytic")
