import json

import pytest

from cli_helpers import check_one_line_error, run

SMALL = ["--model", "llama2-7b", "--system", "dgx-h100", "--num-gpus", "32", "--tp", "2", "--pp", "4", "--gbs", "32",
         "--use-distributed-optimizer"]






def test_event_json_has_the_analytic_fields_and_more(capsys):
    code, out, err = run(["predict", *SMALL, "--engine", "event", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    code, out, _ = run(["predict", *SMALL, "--json"], capsys)
    a = json.loads(out)
    assert d["engine"] == "event" and a["engine"] == "analytic"
    assert set(a) <= set(d)
    assert d["iteration_time_s"] == pytest.approx(a["iteration_time_s"], rel=0.1)
    assert sum(d["breakdown_s"].values()) == pytest.approx(d["iteration_time_s"])
    assert len(d["stage_busy_idle"]) == 4 and d["engine_info"]["tasks"] > 0


def test_readable_event_output(capsys):
    code, out, err = run(["predict", *SMALL, "--engine", "event", "--memory-timeline"], capsys)
    assert code == 0, err
    assert "iteration time" in out and "busy and idle" in out and "memory timeline" in out
    assert "event engine:" in out


def test_event_only_options_need_the_event_engine(capsys):
    code, _, err = run(["predict", *SMALL, "--trace", "t.json", "--slow-rank", "3=2"], capsys)
    check_one_line_error(code, err, "--trace", "--slow-rank", "--engine event")
    code, _, err = run(["predict", *SMALL, "--steps", "2"], capsys)
    check_one_line_error(code, err, "--steps", "needs the event engine")
    code, _, err = run(["predict", *SMALL, "--memory-timeline"], capsys)
    check_one_line_error(code, err, "--memory-timeline")


@pytest.mark.parametrize(("args", "words"), [
    (["--slow-rank", "9999=2"], ("slow_rank", "9999", "0..31")),
    (["--slow-rank", "3"], ("slow_rank", "RANK=FACTOR")),
    (["--slow-rank", "3=-1"], ("slow_rank", "positive")),
    (["--slow-stage", "4=2"], ("slow_stage", "0..3")),
    (["--slow-link", "4=2"], ("slow_link", "0..3")),
    (["--seq-len-cv", "-1"], ("seq_len_cv",)),
    (["--seed", "3"], ("seed", "--seq-len-cv")),
    (["--trace-detail", "layer"], ("trace_detail", "--trace")),
    (["--steps", "0"], ("steps",)),
    (["--export-meta", "m.yaml"], ("export_meta", "--export-ops")),
    (["--trace", "t.json", "--trace-detail", "ops"], ("trace_detail", "auto, block, layer")),
])
def test_bad_event_options_are_one_line_errors(args, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["predict", *SMALL, "--engine", "event", *args], capsys)
    check_one_line_error(code, err, *words)


def test_memory_timeline_with_and_without_a_file(capsys, tmp_path):
    # as the last option, before another option, and with a file
    for tail in (["--memory-timeline"], ["--memory-timeline", "--json"]):
        code, out, err = run(["predict", *SMALL, "--engine", "event", *tail, "--json"], capsys)
        assert code == 0, err
        d = json.loads(out)
        mem = d["memory_timeline"]
        assert "file" not in mem and len(mem["stages"]) == 4
        assert mem["peak_bytes"] == pytest.approx(d["memory"]["peak_bytes"])
    for name in ("mem.json", "mem.csv"):
        path = tmp_path / name
        code, out, err = run(["predict", *SMALL, "--engine", "event", "--memory-timeline", str(path), "--json"],
                             capsys)
        assert code == 0, err
        assert json.loads(out)["memory_timeline"]["file"] == str(path) and path.stat().st_size > 0


def test_trace_export_and_whatif_round_trip(capsys, tmp_path):
    trace = tmp_path / "run.json"
    ops, meta = tmp_path / "ops.parquet", tmp_path / "meta-sim.yaml"
    code, out, err = run(["predict", *SMALL, "--engine", "event", "--trace", str(trace), "--slow-stage", "1=1.5",
                          "--slow-rank", "5=1.2", "--steps", "2", "--export-ops", str(ops), "--export-meta", str(meta),
                          "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["trace"]["file"] == str(trace) and json.loads(trace.read_text())["traceEvents"]
    assert d["op_trace"]["trace"] == str(ops) and d["op_trace"]["steps"] == 2
    assert d["stragglers"]["slowdown"] > 1 and d["stragglers"]["slow_stage"] == {"1": 1.5}
    assert len(d["step_times_s"]) == 2
    code, out, err = run(["whatif", str(ops), "--meta", str(meta), "--json"], capsys)
    assert code == 0, err
    w = json.loads(out)
    assert w["job"]["trial_name"] == "sim" and w["slowdown"] > 1
    assert max(w["slowdown_by_stage"], key=lambda s: w["slowdown_by_stage"][s]) == "1"


def test_seq_len_variation_steps_and_seed(capsys):
    base = ["predict", *SMALL, "--engine", "event", "--seq-len-cv", "0.3", "--steps", "3", "--json"]
    outs = []
    for seed in ("1", "1", "2"):
        code, out, err = run([*base, "--seed", seed], capsys)
        assert code == 0, err
        outs.append(json.loads(out))
    assert outs[0] == outs[1] and outs[0]["step_times_s"] != outs[2]["step_times_s"]
    assert len(outs[0]["step_times_s"]) == 3
    assert outs[0]["iteration_time_s"] == pytest.approx(sum(outs[0]["step_times_s"]) / 3)
