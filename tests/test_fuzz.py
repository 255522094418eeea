"""Fuzzing (issue 15, item 9): any job spec, system YAML or trace table gives a result or a TrainsimError — never
another exception, never a non-finite number in the output."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from trainsim.errors import TrainsimError

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)


def _assert_finite(obj: Any, path: str = "") -> None:
    """Every number in a JSON-like structure is finite (and it serialises as strict JSON)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _assert_finite(v, f"{path}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _assert_finite(v, f"{path}[{i}]")
    elif isinstance(obj, float):
        assert math.isfinite(obj), f"non-finite {obj} at {path}"


# ---- job specs ----------------------------------------------------------------------------------------------------
def _nums(small: list[Any]) -> st.SearchStrategy[Any]:
    """Mostly not given or a plausible value; sometimes absurd (0, negative, huge, odd)."""
    return st.sampled_from([None] * 4 + small * 2 + [0, -1, 10**12, 2**31, 7])


JOB_OPTIONS = st.fixed_dictionaries({
    "model": st.sampled_from(["gpt3-1.7b", "llama3-8b", "mixtral-8x7b", "gpt3-175b", "gpt3-1.7b", None]),
    "system": st.sampled_from(["dgx-h100", "dgx-a100", "nvl72-gb200", "hgx-h200"]),
    "num_gpus": _nums([1, 2, 4, 8, 16, 64, 96]),
    "tp": _nums([1, 2, 4, 8, 3]),
    "pp": _nums([1, 2, 4, 3]),
    "vpp": _nums([1, 2, 3]),
    "cp": _nums([1, 2]),
    "ep": _nums([1, 2, 8]),
    "micro_batch_size": _nums([1, 2, 4]),
    "global_batch_size": st.sampled_from([8, 64, 96, 128, 1024, 1000, 1, 0, -4, 10**12]),
    "seq_length": _nums([128, 2048, 4096, 3000]),
    "num_layers": st.sampled_from([None] * 8 + [2, 4, 24, 0, 10**9]),
    "hidden_size": st.sampled_from([None] * 8 + [256, 1000, 4096, -3]),
    "num_attention_heads": st.sampled_from([None] * 8 + [4, 8, 7]),
    "vocab_size": st.sampled_from([None] * 8 + [1000, 50257, 0]),
    "recompute_granularity": st.sampled_from([None, None, "none", "selective", "full", "sometimes"]),
    "zero_stage": _nums([0, 1, 2, 3]),
    "sequence_parallel": st.booleans(),
    "schedule": st.sampled_from([None] * 4 + ["1f1b", "gpipe", "interleaved", "zb-h1", "bogus"]),
    "train_tokens": st.sampled_from([None, None, 1e9, 3e11, -5.0, float("inf"), float("nan"), 1e30]),
    "price_per_gpu_hour": st.sampled_from([None, None, None, 0.0, 2.5, -1.0, float("nan")]),
    "nic_bandwidth_gbps": st.sampled_from([None, None, None, 100.0, 0.0, -3.0, float("inf")]),
    "fp8": st.booleans(),
})


def _job(values: dict[str, Any]):  # type: ignore[no-untyped-def]
    from trainsim.cli.job_options import JOB_OPTIONS as OPTS
    from trainsim.cli.job_options import job_from_options

    full: dict[str, Any] = {o.name: (False if o.kind is bool else None) for o in OPTS}
    full.update(values)
    return job_from_options(full)


@settings(FUZZ, max_examples=200)
@given(JOB_OPTIONS)
def test_any_job_spec_gives_a_prediction_or_a_trainsim_error(values):
    from trainsim.predictor import predict

    try:
        job = _job(values)
        p = predict(job)
    except TrainsimError as exc:
        event(f"refused: {exc.field}")
        return
    event("predicted")
    data = p.to_json_dict()
    _assert_finite(data)
    json.dumps(data, allow_nan=False)
    assert p.iteration_time_s > 0


PLAUSIBLE = st.fixed_dictionaries({
    "model": st.sampled_from(["gpt3-1.7b", "llama3-8b", "mixtral-8x7b", "llama2-13b", "gpt3-18.4b"]),
    "system": st.sampled_from(["dgx-h100", "dgx-a100", "nvl72-gb200", "dgx-b200"]),
    "num_gpus": st.sampled_from([8, 16, 32, 64, 72, 144]),
    "tp": st.sampled_from([None, 1, 2, 4, 8]),
    "pp": st.sampled_from([None, 1, 2, 4]),
    "vpp": st.sampled_from([None, None, 2]),
    "cp": st.sampled_from([None, None, 2]),
    "ep": st.sampled_from([None, None, 2, 8]),
    "micro_batch_size": st.sampled_from([None, 1, 2, 4]),
    "global_batch_size": st.sampled_from([64, 128, 256, 1152]),
    "seq_length": st.sampled_from([None, 1024, 2048, 8192]),
    "recompute_granularity": st.sampled_from([None, "selective", "full"]),
    "zero_stage": st.sampled_from([None, 1, 3]),
    "sequence_parallel": st.booleans(),
    "overlap_grad_reduce": st.booleans(),
    "schedule": st.sampled_from([None, None, "gpipe", "zb-h1"]),
    "train_tokens": st.sampled_from([None, 1e9, 2e12]),
    "price_per_gpu_hour": st.sampled_from([None, 0.0, 3.5]),
    "fp8": st.booleans(),
})


@settings(FUZZ, max_examples=150)
@given(PLAUSIBLE)
def test_plausible_job_specs_give_finite_predictions_or_trainsim_errors(values):
    from trainsim.predictor import predict

    try:
        p = predict(_job(values))
    except TrainsimError as exc:
        event(f"refused: {exc.field}")
        return
    event("predicted")
    _assert_finite(p.to_json_dict())
    assert p.iteration_time_s > 0 and 0 <= p.mfu <= 1.5


@FUZZ
@given(JOB_OPTIONS, st.integers(1, 3))
def test_any_job_spec_gives_an_event_simulation_or_a_trainsim_error(values, steps):
    from trainsim.predictor import predict

    values = {**values, "model": "gpt3-1.7b", "num_layers": values["num_layers"] or 4, "hidden_size": None,
              "vocab_size": None, "num_attention_heads": None}
    try:
        job = _job(values)
        if job.num_microbatches * job.parallelism.pp * steps > 2000 or job.world_size > 256:
            return  # keep the fuzz run short; the size bound itself is tested in tests/spec/test_limits.py
        p = predict(job, engine="event", steps=steps)
    except TrainsimError:
        event("refused")
        return
    event("simulated")
    _assert_finite(p.to_json_dict())


# ---- system YAMLs -------------------------------------------------------------------------------------------------
BASE_SYSTEM = {
    "name": "fuzz",
    "gpu": {"name": "X", "generation": "hopper", "peak_tflops": {"fp32": 60, "tf32": 400, "fp16": 800, "bf16": 800},
            "vector_tflops": 60, "hbm_bandwidth_tb_s": 3, "hbm_capacity_gb": 96, "num_sms": 100},
    "node": {"gpus_per_node": 8, "nvlink_bandwidth_gb_s": 450},
    "network": {"nics_per_node": 8, "nic_bandwidth_gbit_s": 400},
}
VALUES = st.one_of(st.integers(-5, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                   st.none(), st.booleans(), st.lists(st.integers(0, 3), max_size=2),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
PATHS = st.sampled_from([("gpu", "peak_tflops", "bf16"), ("gpu", "peak_tflops", "fp8"), ("gpu", "vector_tflops"),
                         ("gpu", "hbm_bandwidth_tb_s"), ("gpu", "hbm_capacity_gb"), ("gpu", "num_sms"),
                         ("gpu", "generation"), ("gpu", "name"), ("node", "gpus_per_node"),
                         ("node", "nvlink_bandwidth_gb_s"), ("node", "nvlink_latency_us"),
                         ("network", "nics_per_node"), ("network", "nic_bandwidth_gbit_s"),
                         ("network", "latency_us"), ("network", "oversubscription"),
                         ("network", "full_bisection_nodes"), ("price_per_gpu_hour",), ("gpu",), ("node",),
                         ("extra_key",), ("gpu", "extra_key")])


def _mutate(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(data))
    cur = out
    for key in path[:-1]:
        if not isinstance(cur.get(key), dict):
            cur[key] = {}
        cur = cur[key]
    cur[path[-1]] = value
    return out


@FUZZ
@given(mutations=st.lists(st.tuples(PATHS, VALUES), min_size=1, max_size=3), drop=st.booleans())
def test_any_system_yaml_gives_a_system_or_a_trainsim_error(mutations, drop, tmp_path_factory):
    from trainsim.predictor import predict
    from trainsim.spec.presets import load_system

    data: Any = BASE_SYSTEM
    for path, value in mutations:
        data = _mutate(data, path, value)
    if drop:
        data = {k: v for k, v in data.items() if k != "network"}
    f = tmp_path_factory.mktemp("sys") / "s.yaml"
    try:
        f.write_text(yaml.safe_dump(data))
    except (ValueError, yaml.YAMLError):
        return
    try:
        system = load_system(str(f))
        job = _job({"model": "gpt3-1.7b", "system": None, "num_gpus": 16, "global_batch_size": 32,
                    "train_tokens": 1e9})
        p = predict(job.replace(system=system))
    except TrainsimError as exc:
        event(f"refused: {exc.field.split('.')[0:2]}")
        return
    event("predicted")
    _assert_finite(p.to_json_dict())


@pytest.mark.parametrize("text", ["", "[]", "gpu: 3", "::", "gpu: {name: [1, 2]}", "\t- x", "a: !!python/none"])
def test_malformed_yaml_text_is_a_trainsim_error(text, tmp_path):
    from trainsim.spec.presets import load_system

    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(TrainsimError):
        load_system(str(f))


# ---- trace tables -------------------------------------------------------------------------------------------------
@FUZZ
@given(st.integers(0, 10**6), st.sampled_from(["none", "none", "duration", "duration", "start_ts", "stage", "rank",
                                               "dp_rank", "optype", "seq_id", "step", "mc", "drop-row", "drop-col"]),
       st.sampled_from([-1.0, 0.0, float("nan"), float("inf"), 1e12, 3.0, -7, "x", None]))
def test_any_trace_table_gives_an_analysis_or_a_trainsim_error(seed, column, value):
    from trainsim.whatif import analyze_trace
    from trainsim.whatif.synthetic import synthetic_trace

    df, meta = synthetic_trace(pp=2, dp=2, microbatches=2, steps=2, seed=seed % 7, sequence_jitter=0.05)
    rng = np.random.default_rng(seed)
    df = df.copy()
    row = int(rng.integers(len(df)))
    if column == "drop-row":
        df = df.drop(index=df.index[row])
    elif column == "drop-col":
        df = df.drop(columns=[df.columns[row % len(df.columns)]])
    elif column != "none":
        if isinstance(value, str) or value is None or not pd.api.types.is_numeric_dtype(df[column].dtype):
            df[column] = df[column].astype(object)
        elif isinstance(value, float) and pd.api.types.is_integer_dtype(df[column].dtype):
            df[column] = df[column].astype("float64")
        df.loc[df.index[row], column] = value
    try:
        result = analyze_trace(df, meta)
    except TrainsimError:
        event("refused")
        return
    event("analysed")
    _assert_finite(json.loads(result.to_json()))
    assert result.slowdown > 0


def test_empty_and_wrong_type_traces_are_trainsim_errors():
    from trainsim.whatif import analyze_trace
    from trainsim.whatif.synthetic import synthetic_trace

    _, meta = synthetic_trace(pp=2, dp=1, microbatches=2, steps=1)
    for bad in (pd.DataFrame(), pd.DataFrame({"step": ["a"]}), "no-such-file.parquet"):
        with pytest.raises(TrainsimError):
            analyze_trace(bad, meta)  # type: ignore[arg-type]


# ---- command lines ------------------------------------------------------------------------------------------------
FLAGS = ["-m", "-n", "--tp", "--pp", "--gbs", "--mbs", "--seq-length", "--train-tokens", "--system", "--engine",
         "--num-layers", "--recompute-granularity", "--zero-stage", "--steps", "--slow-rank", "--lr",
         "--num-layers-per-virtual-pipeline-stage", "--fp8-format", "--megatron-args"]
TOKENS = st.sampled_from(["llama3-8b", "gpt3-1.7b", "8", "2", "0", "-1", "1e400", "nan", "inf", "x", "", "event",
                          "full", "1=1.5", "3=0", "dgx-h100", "missing.yaml", "hybrid", "99999999999999999999"])


@settings(FUZZ, max_examples=80)
@given(st.lists(st.tuples(st.sampled_from(FLAGS), TOKENS), min_size=1, max_size=6))
def test_any_predict_command_line_exits_0_or_gives_one_line(pairs):
    from cli_helpers import run_plain

    args = ["predict", "-m", "gpt3-1.7b", "-n", "8", "--gbs", "16", "--seq-length", "1024", "--json"]
    for flag, token in pairs:
        args += [flag, token]
    code, out, err = run_plain(args)
    assert "Traceback" not in err
    if code == 0:
        _assert_finite(json.loads(out))
        event("predicted")
    else:
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning:")]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
        event("refused")
