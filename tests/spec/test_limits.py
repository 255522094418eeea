"""Absurd sizes and non-finite numbers are refused with one error (issue 15, item 4)."""

from __future__ import annotations

import pandas as pd
import pytest

from cli_helpers import check_one_line_error, run
from trainsim.errors import TrainsimError
from trainsim.spec import Training

BASE = ["predict", "-m", "llama3-8b", "-n", "8", "--gbs", "64"]


@pytest.mark.parametrize("extra,field", [
    (["-n", "1000000000", "--gbs", "1000000000"], "num_gpus"),
    (["--num-layers", "1000000000000"], "model.num_layers"),
    (["--hidden-size", "100000000000"], "model.hidden_size"),
    (["--seq-length", "10000000000"], "training.seq_length"),
    (["--train-tokens", "inf"], "training.train_tokens"),
    (["--train-tokens", "1e30"], "training.train_tokens"),
    (["--price-per-gpu-hour", "inf"], "system.price_per_gpu_hour"),
    (["--nic-bandwidth-gbps", "nan"], "nic_bandwidth"),
    (["--gbs", "100000000", "--engine", "event"], "engine"),
    (["--steps", "100000000", "--engine", "event"], "engine"),
])
def test_absurd_predict_inputs_are_one_line_errors(extra, field, capsys):
    code, _, err = run([*BASE, *extra], capsys)
    check_one_line_error(code, err, field)


def test_search_range_that_expands_to_millions_is_refused(capsys):
    code, _, err = run(["search", "-m", "llama3-8b", "-n", "1:100000000", "--gbs", "64", "--no-progress"], capsys)
    check_one_line_error(code, err, "num_gpus", "range")


def test_non_finite_fields_are_refused_in_the_api():
    with pytest.raises(TrainsimError, match="finite"):
        Training(global_batch_size=8, train_tokens=float("nan"))


def _trace(duration: float, start: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame({"step": [0], "rank": [0], "dp_rank": [0], "stage": [0], "optype": ["forward-compute"],
                         "seq_id": [0], "mc": [0], "gmc": [0], "mb_id": [0], "start_ts": [start],
                         "duration": [duration]})


def test_trace_with_a_trillion_second_op_is_refused():
    from trainsim.io.traces import RELEASED_SCHEMA, validate_op_trace

    df = _trace(1e12)
    assert set(RELEASED_SCHEMA) <= set(df.columns)
    with pytest.raises(TrainsimError, match="duration"):
        validate_op_trace(df)
    validate_op_trace(_trace(0.01))
