import pytest

from trainsim import predict
from trainsim.errors import TrainsimError
from trainsim.plan import chinchilla_tokens, plan
from trainsim.search.space import CandidateSpec, build_job
from trainsim.spec import Training, load_system


@pytest.fixture(scope="module")
def small():
    return plan("dgx-a100", 256, days=10, training=Training(global_batch_size=512, seq_length=2048))


def test_realistic_point_is_the_largest_shape_that_trains_in_time(small):
    d = small.to_json_dict()
    naive, opt = d["naive"], d["optimal"]
    assert set(naive) >= {"params", "tokens", "days", "mfu"}
    assert set(opt) >= {"params", "tokens", "days", "mfu", "layers", "hidden_size", "plan"}
    # nothing trains at 100 % utilization: the naive model needs more than the budget, the realistic one fits it
    assert naive["days"] > 10 and 0 < naive["mfu"] < 1
    assert opt["params"] < naive["params"] and opt["days"] <= 10 and 0 < opt["mfu"] < 1
    assert opt["tokens"] == pytest.approx(chinchilla_tokens(opt["params"]))
    # within the evaluated shapes, every larger one misses the budget
    for r in small.evaluated:
        if r.shape.params > opt["params"]:
            assert not r.feasible or r.days > 10
    # √(utilization) scaling: the realistic size is close to N_naive·√MFU
    assert opt["params"] == pytest.approx(naive["params"] * opt["mfu"] ** 0.5, rel=0.15)


def test_the_optimal_plan_reproduces_with_predict(small):
    o = small.optimal
    b = o.best
    shape_model = o.shape.model
    training = Training(global_batch_size=512, seq_length=2048, train_tokens=o.tokens)
    job = build_job(shape_model, load_system("dgx-a100"), training, CandidateSpec(*b.spec))
    p = predict(job)
    assert p.memory.fits and p.training.days == pytest.approx(o.days, rel=1e-9)
    assert p.job["num_gpus"] == 256 and p.job["tp"] == b.tp and p.job["pp"] == b.pp


def test_more_days_allow_a_bigger_model(small):
    longer = plan("dgx-a100", 256, days=40, training=Training(global_batch_size=512, seq_length=2048))
    assert longer.optimal.shape.params > small.optimal.shape.params
    assert longer.naive_params == pytest.approx(2 * small.naive_params)


def test_dims_restrict_the_per_shape_plans():
    r = plan("dgx-a100", 256, days=10, training=Training(global_batch_size=512, seq_length=2048),
             dims={"recompute": "full", "micro_batch_size": 1, "tp": 8})
    for res in r.evaluated:
        if res.best is not None:
            assert (res.best.recompute, res.best.micro_batch_size, res.best.tp) == ("full", 1, 8)
    with pytest.raises(TrainsimError):
        plan("dgx-a100", 256, days=10, dims={"speed": "all"})


def test_no_layout_is_a_clear_error():
    with pytest.raises(TrainsimError) as exc:
        plan("dgx-a100", 997, days=10)  # a prime GPU count: no shape splits over it with tp ≤ 8 and gbs 1920
    assert exc.value.field == "num_gpus"
