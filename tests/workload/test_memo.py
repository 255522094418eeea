"""The per-job memo of the hot prediction path: same object hits, a changed copy misses."""

from __future__ import annotations

import pytest

from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.workload.memo import per_job
from trainsim.workload.sharding import sharding_of
from trainsim.workload.stages import stage_layer_counts


def _job(**training: object) -> Job:
    return Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"), num_gpus=16,
               parallelism=Parallelism(tp=2, pp=2), training=Training(global_batch_size=64, **training))


def test_per_job_caches_by_identity_only() -> None:
    calls: list[object] = []

    @per_job
    def f(job: Job) -> int:
        calls.append(job)
        return len(calls)

    a, b = _job(), _job()
    assert a == b and a is not b
    assert f(a) == 1 and f(a) == 1  # same object: cached
    assert f(b) == 2  # equal but another object: recomputed
    assert f(a) == 3  # one slot: the last job only


def test_model_copy_sees_its_own_values() -> None:
    job = _job(zero_stage=0)
    assert sharding_of(job).zero_stage == 0
    full = stage_layer_counts(job, 0)
    changed = job.model_copy(update={"training": job.training.model_copy(update={"zero_stage": 1,
                                                                                 "recompute_granularity": "full"})})
    assert sharding_of(changed).zero_stage == 1
    assert {mode for _moe, mode in stage_layer_counts(changed, 0)} == {"full"}
    assert sharding_of(job).zero_stage == 0 and stage_layer_counts(job, 0) == full


def test_stage_layer_counts_returns_a_fresh_dict() -> None:
    job = _job()
    counts = stage_layer_counts(job, 1)
    counts.clear()
    assert sum(stage_layer_counts(job, 1).values()) == job.layers_per_stage[1]


def test_alike_stages_share_costs_with_their_own_index() -> None:
    from trainsim.cost.job_costs import stage_costs

    job = Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"), num_gpus=32,
              parallelism=Parallelism(tp=2, pp=4), training=Training(global_batch_size=64))
    costs = stage_costs(job)
    assert [c.stage for c in costs] == [0, 1, 2, 3]
    middle = costs[1], costs[2]
    assert middle[0].body.fwd == middle[1].body.fwd and middle[0].grad_sync == middle[1].grad_sync
    assert costs[0].pre.fwd > 0 and costs[1].pre.fwd == 0 and costs[3].post.fwd > 0 and costs[2].post.fwd == 0


def test_surface_memo_matches_interpolation() -> None:
    from trainsim.cost.kernel_surfaces import packaged_surface
    from trainsim.workload.layers import layer_work, shard_of

    surface = packaged_surface()
    if surface is None:
        pytest.skip("the packaged H100 kernel surface is not installed")
    job = Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-h100"), num_gpus=16,
              parallelism=Parallelism(tp=2), training=Training(global_batch_size=64))
    ops = layer_work(job.model, shard_of(job), False).fwd
    surface.clear_memo()
    first = [surface.throughput(op) for op in ops]
    assert first == [surface._interpolate(op) for op in ops]
    assert [surface.throughput(op) for op in ops] == first and any(t is not None for t in first)
