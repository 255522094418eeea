"""The notebook API (issue 15, item 6): predict from names, dir(), to_frame, figures, HTML reprs."""

from __future__ import annotations

import pandas as pd
import pytest

import trainsim
from trainsim.errors import TrainsimError


def test_predict_from_names_equals_predict_of_the_job():
    p = trainsim.predict("llama3-8b", system="dgx-h100", num_gpus=8, tp=2, gbs=64, seq_length=4096,
                         use_distributed_optimizer=True)
    job = trainsim.Job(model=trainsim.load_model("llama3-8b"), system=trainsim.load_system("dgx-h100"), num_gpus=8,
                       parallelism=trainsim.Parallelism(tp=2),
                       training=trainsim.Training(global_batch_size=64, seq_length=4096, zero_stage=1))
    q = trainsim.predict(job)
    assert p.iteration_time_s == q.iteration_time_s and p.job == q.job


def test_predict_with_model_and_system_objects_and_engine_options():
    model = trainsim.load_model("gpt3-1.7b")
    p = trainsim.predict(model, system=trainsim.load_system("dgx-a100"), num_gpus=4, pp=2, gbs=8, precision="fp16",
                         engine="event", steps=2)
    assert p.engine == "event" and p.job["precision"] == "fp16" and len(p.step_times_s) == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("kwargs,match", [
    ({"tensor_parallel": 2}, "unknown job option"),
    ({"precision": "int4"}, "unknown precision"),
])
def test_bad_keywords_are_trainsim_errors(kwargs, match):
    with pytest.raises(TrainsimError, match=match):
        trainsim.predict("llama3-8b", num_gpus=8, gbs=64, **kwargs)


def test_dir_lists_the_public_api():
    names = dir(trainsim)
    for name in ("predict", "Job", "Prediction", "search", "SearchResult", "analyze_trace", "WhatIfResult", "plan",
                 "load_hf_config", "plot_search", "plot_worker_heatmap", "__version__"):
        assert name in names and name in trainsim.__all__
    for name in trainsim.__all__:
        assert getattr(trainsim, name) is not None


def test_prediction_to_frame_and_html():
    p = trainsim.predict("gpt3-1.7b", num_gpus=8, gbs=32, seq_length=2048, train_tokens=1e9)
    df = p.to_frame()
    assert isinstance(df, pd.DataFrame) and len(df) == 1
    assert df["iteration_time_s"].iloc[0] == p.iteration_time_s and "cost_usd" in df
    frames = pd.concat([p.to_frame(), trainsim.predict("gpt3-1.7b", num_gpus=8, tp=2, gbs=32).to_frame()])
    assert list(frames["tp"]) == [1, 2]
    html = p._repr_html_()
    assert "<table>" in html and "iteration time" in html


def test_search_result_frame_figure_and_html(tmp_path):
    from matplotlib.figure import Figure

    space = trainsim.SearchSpace(model="gpt3-1.7b", system="dgx-a100", num_gpus=8,
                                 training={"global_batch_size": 32}, pp=[1], tp=[1, 2])
    result = trainsim.search(space, workers=1)
    assert isinstance(result.to_frame(), pd.DataFrame) and len(result.to_frame()) == len(result.candidates)
    fig = result.plot()
    assert isinstance(fig, Figure) and not list(tmp_path.iterdir())
    out = tmp_path / "space.png"
    assert isinstance(trainsim.plot_search(result, out), Figure) and out.read_bytes()[:4] == b"\x89PNG"
    assert "<table" in result._repr_html_()


def test_whatif_result_frame_figure_and_html(tmp_path):
    from matplotlib.figure import Figure

    from trainsim.io.traces import write_op_trace
    from trainsim.whatif.synthetic import synthetic_trace

    df, meta = synthetic_trace(pp=2, dp=2, microbatches=4, steps=[1, 2], slow_stages={1: 1.5}, seed=1, trial_name="J")
    trace = tmp_path / "trace-J.parquet"
    write_op_trace(df, meta, trace, tmp_path / "meta-J.yaml")
    result = trainsim.analyze_trace(trace)
    frame = result.to_frame()
    assert len(frame) == 1 and frame["slowdown"].iloc[0] == result.slowdown
    assert isinstance(result.plot_heatmap(), Figure)
    assert result.verdict in result._repr_html_()
