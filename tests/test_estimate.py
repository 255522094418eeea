import pytest

from trainsim.cost.calibration import Calibration
from trainsim.cost.job_costs import AnalyticCostModel, stage_costs
from trainsim.estimate import BREAKDOWN_KEYS, estimate
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload.sharding import sharding_of


def job(**kw):
    par = {k: kw.pop(k) for k in list(kw) if k in Parallelism.model_fields}
    return Job(model=load_model(kw.pop("model", "gpt3-175b")), system=load_system(kw.pop("system", "dgx-a100")),
               parallelism=Parallelism(**par), training=Training(**{"global_batch_size": 512, **kw}),
               num_gpus=kw.pop("num_gpus", None)
               or par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1) * par.get("dp", 1))


def test_breakdown_sums_to_the_iteration_time():
    for j in (job(tp=8, pp=8, dp=2), job(tp=8, pp=4, vpp=3, dp=2, zero_stage=1, overlap_grad_reduce=True),
              job(model="llama3-8b", system="dgx-h100", tp=1, cp=2, dp=4, global_batch_size=64)):
        e = estimate(j)
        assert set(e.breakdown_s) == set(BREAKDOWN_KEYS)
        assert sum(e.breakdown_s.values()) == pytest.approx(e.iteration_time_s)
        assert all(v >= 0 for v in e.breakdown_s.values())


def test_uniform_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1():
    # a model with one layer per stage and no embedding/head imbalance is approximated by looking at the bubble
    j = job(tp=8, pp=8, dp=1, global_batch_size=64)
    e = estimate(j)
    stages = stage_costs(j)
    m, p = j.num_microbatches, 8
    work = e.breakdown_s["compute"] + e.breakdown_s["tp_comm"]
    per_mb = work / m
    assert e.breakdown_s["pipeline_bubble"] == pytest.approx((p - 1) * per_mb, rel=0.08)
    assert max(s.fwd + s.bwd for s in stages) >= min(s.fwd + s.bwd for s in stages)


def test_interleaving_shrinks_the_bubble_and_overlap_hides_data_parallel_traffic():
    base = estimate(job(tp=8, pp=8, dp=2, global_batch_size=64))
    inter = estimate(job(tp=8, pp=8, vpp=3, dp=2, global_batch_size=64))
    assert inter.breakdown_s["pipeline_bubble"] < base.breakdown_s["pipeline_bubble"] / 2
    plain = estimate(job(tp=8, pp=1, dp=8, model="gpt3-18.4b", global_batch_size=64))
    hidden = estimate(job(tp=8, pp=1, dp=8, model="gpt3-18.4b", global_batch_size=64, overlap_grad_reduce=True))
    assert hidden.breakdown_s["dp_comm"] < plain.breakdown_s["dp_comm"]


def test_more_bandwidth_never_slows_a_job():
    j = job(tp=8, pp=2, dp=4, global_batch_size=64)
    slow = Calibration(network_efficiency=0.3, nvlink_efficiency=0.3)
    fast = Calibration(network_efficiency=0.95, nvlink_efficiency=0.95)
    t_slow = estimate(j, AnalyticCostModel(j.system, slow, j.num_nodes)).iteration_time_s
    t_fast = estimate(j, AnalyticCostModel(j.system, fast, j.num_nodes)).iteration_time_s
    assert t_fast < t_slow


def test_zero_bubble_is_faster_than_1f1b():
    a = estimate(job(tp=8, pp=8, dp=1, global_batch_size=32)).iteration_time_s
    b = estimate(job(tp=8, pp=8, dp=1, global_batch_size=32, schedule="zb-h1")).iteration_time_s
    c = estimate(job(tp=8, pp=8, dp=1, global_batch_size=32, schedule="gpipe")).iteration_time_s
    assert b < a <= c * 1.0001



def _zero(stage: int, gbs: int, overlap: bool | None = None) -> Job:
    return Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), num_gpus=16, framework="deepspeed",
               training=Training(global_batch_size=gbs, micro_batch_size=2, zero_stage=stage,
                                 overlap_grad_reduce=overlap))


def _dp(job: Job) -> float:
    return estimate(job).breakdown_s["dp_comm"]


def test_deepspeed_zero2_reduces_after_every_micro_batch_in_both_engines():
    """DeepSpeed ZeRO-2 reduces each backward's gradients (partition_gradients), ZeRO-1 only at the accumulation
    boundary: four micro-batches cost ZeRO-2 three more rounds of its reduction than one does, and ZeRO-1 nothing;
    under overlap_comm each round is mostly hidden under its backward. The event engine agrees."""
    from trainsim import predict
    from trainsim.cost.job_costs import default_cost_model

    one, four = _zero(2, 32), _zero(2, 128)  # 1 and 4 micro-batches of 2 on dp 16
    assert four.num_microbatches == 4 and sharding_of(four).reduce_per_microbatch
    assert not sharding_of(_zero(1, 128)).reduce_per_microbatch
    reduction = stage_costs(four, default_cost_model(four))[0].grad_sync
    assert reduction > 0
    assert _dp(four) - _dp(one) == pytest.approx(3 * reduction)
    assert _dp(_zero(1, 128)) == pytest.approx(_dp(_zero(1, 32)))
    hidden = _dp(_zero(2, 128, True)) - _dp(_zero(2, 32, True))
    assert 0 < hidden < 3 * reduction / 2
    for j in (one, four, _zero(2, 128, True)):
        a, e = predict(j), predict(j, engine="event")
        assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=2e-3)
