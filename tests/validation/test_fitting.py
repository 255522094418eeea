"""trainsim.validation.fitting: the unstated choices that make a measured run's job fit (the run ran, so it fit).

The row-level behaviour (recomputation, distributed optimizer, micro-batch, expert parallelism, offloading stage) is
exercised end to end in test_other_sources.py; these check the rules themselves."""

from __future__ import annotations

import pytest

from trainsim.predictor import memory_report
from trainsim.spec import Job, Parallelism, Training, load_framework, load_model, load_system
from trainsim.validation.fitting import expert_parallel_that_fits, offload_settings, recompute_that_fits


@pytest.mark.parametrize(("framework", "stated", "expected", "implied"), [
    ("deepspeed", {"optimizer_offload": 1.0}, {"optimizer_offload": 1.0, "zero": 2}, True),  # ZeRO-Offload: ZeRO-2
    ("deepspeed", {"param_offload": True}, {"param_offload": True, "zero": 3}, True),
    ("deepspeed", {"optimizer_offload": 1.0, "zero": 1}, {"optimizer_offload": 1.0, "zero": 1}, False),
    ("fsdp", {"optimizer_offload": 1.0}, {"optimizer_offload": 1.0, "param_offload": True}, False),  # shards already
    ("megatron-core", {}, {}, False),
])
def test_offload_settings_complete_the_stated_offloading(framework, stated, expected, implied):
    assert offload_settings(stated, load_framework(framework)) is implied
    assert stated == expected


def _mixtral(ep: int = 1) -> Job:
    return Job(model=load_model("mixtral-8x22b"), system=load_system("dgx-h100"), num_gpus=128,
               parallelism=Parallelism(tp=2, pp=4, ep=ep), framework="megatron-core",
               training=Training(global_batch_size=256, seq_length=4096, zero_stage=1))


def test_expert_parallelism_only_when_the_default_does_not_fit():
    job = _mixtral()
    assert not memory_report(job).fits

    def fit_with(par: Parallelism, recompute: bool = True, tr: Training | None = None) -> tuple[Job, list[str]]:
        return _mixtral(par.ep), []

    fitted, _, note = expert_parallel_that_fits(job, [], fit_with)
    assert fitted.parallelism.ep > 1 and memory_report(fitted).fits and note
    same, _, none = expert_parallel_that_fits(fitted, [], fit_with)
    assert same is fitted and none == []


def test_recompute_is_left_alone_when_the_job_fits():
    job = Job(model=load_model("llama2-7b"), system=load_system("dgx-h100"), num_gpus=8,
              training=Training(global_batch_size=8, seq_length=2048), framework="megatron-core")
    assert recompute_that_fits(job, lambda tr: job) == (job, None)


def _llama70b(framework: str, **kw) -> Job:  # type: ignore[no-untyped-def]
    def build(tr: Training) -> Job:
        return Job(model=load_model("llama3-70b"), system=load_system("nvl72-gb200"), num_gpus=64, framework=framework,
                   training=tr)

    return build(Training(global_batch_size=256, micro_batch_size=2, seq_length=8192, zero_stage=3, **kw))


def test_unstated_recompute_is_the_fewest_megatron_block_layers_that_fit():
    job = _llama70b("nemo")
    assert not memory_report(job).fits

    def build(tr: Training) -> Job:
        return Job(model=job.model, system=job.system, num_gpus=64, framework="nemo", training=tr)

    fitted, why = recompute_that_fits(job, build)
    n = fitted.training.recompute_num_layers
    assert fitted.training.recompute_granularity == "full" and n is not None and 1 <= n < 80
    assert memory_report(fitted).fits and why is not None and f"full of {n} layers" in why
    # one layer fewer does not fit: the fewest
    assert not memory_report(build(fitted.training.replace(recompute_num_layers=n - 1))).fits
    # stacks without Megatron's block recomputation checkpoint every layer
    ds = _llama70b("torchtitan")
    full, _ = recompute_that_fits(ds, lambda tr: Job(model=ds.model, system=ds.system, num_gpus=64,
                                                     framework="torchtitan", training=tr))
    assert full.training.recompute_num_layers is None
