"""The per-job memo of the hot prediction path: same object hits, a changed copy misses."""

from __future__ import annotations

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
