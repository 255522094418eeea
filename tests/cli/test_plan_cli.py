import json

import pytest

from cli_helpers import run


def test_vtrain_table_iii_budget_json(capsys):
    code, out, err = run(["plan", "-s", "dgx-a100", "-n", "3360", "--days", "30", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    naive, opt = d["naive"], d["optimal"]
    assert naive["params"] == pytest.approx(146.7e9, rel=2e-3) and naive["tokens"] == pytest.approx(3.09e12, rel=2e-3)
    assert naive["days"] > 30  # the naive model cannot train in 30 days at realistic utilization
    assert set(opt) >= {"params", "tokens", "days", "mfu", "layers", "hidden_size", "plan"}
    assert opt["params"] < naive["params"] and opt["days"] <= 30 and opt["plan"]["num_gpus"] == 3360
    assert d["budget"]["limited_by"] == "days"


def test_readable_output_and_dollar_budget(capsys):
    code, out, _ = run(["plan", "-s", "dgx-a100", "-n", "256", "--budget", "500000", "--price-per-gpu-hour", "2",
                        "--gbs", "512", "--mbs", "1", "--recompute-granularity", "full"], capsys)
    assert code == 0
    assert "limited by the dollar budget" in out and "naive" in out and "realistic" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-n", "256"], "--days"),
        (["-n", "256", "--days", "0"], "positive"),
        (["-n", "256", "--days", "10", "--precision", "fp4"], "unknown precision"),
        (["-n", "256", "--days", "10", "--template", "mixtral-8x7b"], "dense"),
        (["-n", "256", "--days", "10", "--tp", "x"], "cannot read"),
        (["-n", "997", "--days", "10"], "no model shape"),
    ],
)
def test_plan_errors(args, words, capsys):
    code, _out, err = run(["plan", "-s", "dgx-a100", *args], capsys)
    assert code == 2 and words in err and err.count("\n") == 1
