import pytest

from trainsim.errors import TrainsimError
from trainsim.metrics import cost_per_iteration, training_run, utilization
from trainsim.predictor import predict
from trainsim.service import Metrics, Predictor
from trainsim.spec import Job, Parallelism, Training, load_model, load_system


def small_job(**kw):
    return Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"), num_gpus=8,
               parallelism=Parallelism(tp=2, pp=4), training=Training(global_batch_size=64, **kw))


def test_metrics_match_predict_and_are_cached():
    job = small_job()
    p = Predictor()
    m = p.metrics(job)
    full = predict(job)
    assert isinstance(m, Metrics)
    assert m.iteration_time_s == full.iteration_time_s and m.mfu == full.mfu and m.hfu == full.hfu
    assert m.fits == full.memory.fits and m.peak_memory_bytes == full.memory.peak_bytes
    assert m.bubble_fraction == full.bubble_fraction
    assert sum(m.breakdown.values()) == pytest.approx(m.iteration_time_s)
    assert m.cost_per_iteration_usd == pytest.approx(
        m.iteration_time_s / 3600 * 8 * job.system.price_per_gpu_hour)
    assert (p.hits, p.misses) == (0, 1)
    assert p.metrics(small_job()) == m  # an equal job is a cache hit
    assert (p.hits, p.misses) == (1, 1)
    assert p.metrics(small_job(micro_batch_size=2)) != m
    with pytest.raises(AttributeError):
        m.mfu = 0.5  # type: ignore[misc]


def test_training_run_agrees_with_predict():
    job = small_job(train_tokens=1e9)
    m = Predictor().metrics(job)
    run = m.training(1e9)
    full = predict(job).training
    assert full is not None
    assert run.days == pytest.approx(full.days) and run.cost_usd == pytest.approx(full.cost_usd)
    assert run.gpu_hours == pytest.approx(run.days * 24 * 8)


def test_event_engine_and_cache_limit():
    p = Predictor(engine="event", cache_size=1)
    a = p.metrics(small_job())
    p.metrics(small_job(micro_batch_size=2))
    p.metrics(small_job())  # evicted: computed again
    assert p.misses == 3 and a.engine == "event"


def test_bad_arguments():
    with pytest.raises(TrainsimError, match="engine"):
        Predictor(engine="fast")  # type: ignore[arg-type]
    with pytest.raises(TrainsimError, match="train_tokens"):
        training_run(0, 1, 1, 1, 1)


def test_rate_helpers():
    assert utilization(1e15, 2.0, 4, 1e14) == pytest.approx(1.25)
    assert cost_per_iteration(3600.0, 2, 3.0) == pytest.approx(6.0)
