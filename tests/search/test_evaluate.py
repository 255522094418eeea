import pytest

from trainsim import predict
from trainsim.search.evaluate import EvalContext, evaluate_chunk, evaluate_spec, make_candidate
from trainsim.search.space import SearchSpace, build_job, enumerate_space
from trainsim.spec import Training


@pytest.fixture(scope="module")
def space():
    return SearchSpace(model="mt-nlg-530b", system="dgx-a100", tp=8, dp="8,12", pp="15,35",
                       zero_stage="0,1", rank_order="tp-cp-ep-dp-pp,dp-cp-ep-tp-pp", others="default",
                       training=Training(global_batch_size=1920, recompute_granularity="full", train_tokens=270e9))


def context(space, include_unfit=False, price=2.0):
    return EvalContext(space.model, space.system, space.training, price_per_gpu_hour=price,
                       train_tokens=space.training.train_tokens, include_unfit=include_unfit)


def test_candidates_match_predict(space):
    en = enumerate_space(space)
    ctx = context(space, include_unfit=True)
    results = evaluate_chunk(ctx, en.candidates)
    assert len(results) == len(en.candidates) == 16
    for i, (spec, res) in enumerate(zip(en.candidates, results, strict=True)):
        c = make_candidate(i, spec, res, ctx)
        p = predict(build_job(space.model, space.system, space.training, spec))
        assert c.iteration_time_s == pytest.approx(p.iteration_time_s, rel=1e-12)
        assert c.mfu == pytest.approx(p.mfu, rel=1e-12) and c.hfu == pytest.approx(p.hfu, rel=1e-12)
        assert c.peak_memory_bytes == pytest.approx(p.memory.peak_bytes, rel=1e-12)
        assert c.fits == p.memory.fits
        assert c.training_days == pytest.approx(p.training.days, rel=1e-12)
        assert c.gpu_hours == pytest.approx(p.training.gpu_hours, rel=1e-12)
        assert c.cost_usd == pytest.approx(p.training.cost_usd, rel=1e-12)
        assert c.tokens_per_s == pytest.approx(p.tokens_per_s, rel=1e-12)
        assert c.breakdown_s == pytest.approx(p.breakdown_s, rel=1e-12)
        assert c.num_nodes == p.job["num_nodes"] and c.dp == p.job["dp"]


def test_shared_memory_of_rank_orders_equals_one_by_one(space):
    en = enumerate_space(space)
    ctx = context(space)
    assert evaluate_chunk(ctx, en.candidates) == [evaluate_spec(ctx, s) for s in en.candidates]


def test_configurations_that_do_not_fit_are_kept_but_only_timed_on_request(space):
    en = enumerate_space(space)
    plain = [make_candidate(i, s, r, context(space)) for i, (s, r) in
             enumerate(zip(en.candidates, evaluate_chunk(context(space), en.candidates), strict=True))]
    unfit = [c for c in plain if not c.fits]
    assert unfit and all(c.iteration_time_s is None and c.cost_usd is None and c.peak_memory_bytes > 85.9e9
                         for c in unfit)
    assert all(c.iteration_time_s is not None for c in plain if c.fits)
    full = evaluate_chunk(context(space, include_unfit=True), en.candidates)
    assert all(r[3] is not None for r in full)


def test_without_token_budget_only_per_iteration_cost():
    sp = SearchSpace(model="gpt3-1.7b", system="dgx-a100", num_gpus=8, others="default",
                     training=Training(global_batch_size=16))
    en = enumerate_space(sp)
    ctx = EvalContext(sp.model, sp.system, sp.training, price_per_gpu_hour=3.0)
    c = make_candidate(0, en.candidates[0], evaluate_chunk(ctx, en.candidates)[0], ctx)
    assert c.training_days is None and c.cost_usd is None
    assert c.cost_per_iteration_usd == pytest.approx(c.iteration_time_s / 3600 * 8 * 3.0)
    assert c.plan() == "tp 1 · pp 1 · dp 8"
