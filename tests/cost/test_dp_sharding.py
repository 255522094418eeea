"""Data-parallel behaviour: per-micro-batch ZeRO-3 traffic, prefetch depth, interleaved overlap window."""

from types import SimpleNamespace

import pytest

from trainsim.cost.job_costs import Zero3Comm, zero3_overhead, zero3_pass_times
from trainsim.engine import simulate_job
from trainsim.estimate import _overlapped_sync, estimate
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload.sharding import sharding_of


def test_prefetch_hides_gathers_until_the_stream_is_the_bottleneck():
    c = Zero3Comm(gather=1.0, reduce=1.5, prefetch_depth=1, gather_in_backward=True)
    fwd, bwd = zero3_pass_times(10, 2.0, 4.0, c)
    assert fwd == pytest.approx(10 * 2.0 + 1.0)  # only the first gather is exposed
    assert bwd == pytest.approx(1.0 + 10 * 4.0 + 1.5)  # first gather, last reduce-scatter
    slow_net = Zero3Comm(gather=3.0, reduce=3.0, prefetch_depth=1, gather_in_backward=True)
    fwd, bwd = zero3_pass_times(10, 2.0, 4.0, slow_net)
    assert fwd == pytest.approx(10 * 3.0 + 2.0) and bwd == pytest.approx(10 * 6.0 + 4.0)
    serial = Zero3Comm(gather=1.0, reduce=1.5, prefetch_depth=0, gather_in_backward=True)
    assert zero3_overhead(10, 2.0, 4.0, serial, 0.1) > zero3_overhead(10, 2.0, 4.0, c, 0.1)
    no_regather = Zero3Comm(gather=1.0, reduce=1.5, prefetch_depth=1, gather_in_backward=False)
    assert zero3_pass_times(10, 2.0, 4.0, no_regather)[1] < bwd


def test_interleaving_lets_early_chunks_reduce_behind_later_chunks():
    stage = SimpleNamespace(bwd=8.0, grad_sync=6.0, grad_bucket=0.5)
    one = _overlapped_sync(stage, vpp=1, pp=4, slow=0.0)  # type: ignore[arg-type]
    four = _overlapped_sync(stage, vpp=4, pp=4, slow=0.0)  # type: ignore[arg-type]
    assert one == pytest.approx(max(0.5, 6.0 - 8.0))
    assert four <= one
    big = SimpleNamespace(bwd=8.0, grad_sync=40.0, grad_bucket=0.5)
    # chunk c's last backward ends c·pp chunk-backwards early: 4 chunks of 10 s, windows of 8 s between them
    assert _overlapped_sync(big, vpp=4, pp=4, slow=0.0) < _overlapped_sync(big, vpp=1, pp=4, slow=0.0)  # type: ignore[arg-type]


def _fsdp_job(num_gpus: int) -> Job:
    return Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), parallelism=Parallelism(),
               training=Training(global_batch_size=num_gpus, zero_stage=3), num_gpus=num_gpus)


def test_zero3_gathers_every_microbatch_without_pipelining_and_both_engines_agree():
    job = _fsdp_job(64)
    sh = sharding_of(job)
    assert sh.per_microbatch_gather and sh.reshard_after_forward and not sh.gather_per_step
    a = estimate(job).iteration_time_s
    e = simulate_job(job)[0].iteration_time_s
    assert e == pytest.approx(a, rel=0.05)


def test_zero3_cost_grows_with_the_group_at_fixed_work_per_gpu():
    small, large = estimate(_fsdp_job(64)), estimate(_fsdp_job(1024))
    assert large.breakdown_s["dp_comm"] > small.breakdown_s["dp_comm"]


def test_deepspeed_stage3_gathers_per_submodule_and_pays_the_latency_each_time():
    def job(framework: str) -> Job:
        return Job(model=load_model("llama2-7b"), system=load_system("dgx-a100"), parallelism=Parallelism(),
                   training=Training(global_batch_size=512, zero_stage=3), num_gpus=512, framework=framework)

    ds, fsdp = job("deepspeed"), job("fsdp")
    assert sharding_of(ds).collectives_per_layer > 1 and sharding_of(fsdp).collectives_per_layer == 1
    assert estimate(ds).breakdown_s["dp_comm"] > estimate(fsdp).breakdown_s["dp_comm"]
