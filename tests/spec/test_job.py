import warnings

import pytest

from trainsim.errors import TrainsimError, TrainsimWarning
from trainsim.spec import Job, Parallelism, Training, load_model, load_system


def make(model="gpt3-175b", system="dgx-a100", num_gpus=64, **kw):
    par = {k: kw.pop(k) for k in list(kw) if k in Parallelism.model_fields}
    tr = {"global_batch_size": 64, **kw}
    return Job(model=load_model(model), system=load_system(system), parallelism=Parallelism(**par),
               training=Training(**tr), num_gpus=num_gpus)


def test_dp_is_derived_and_checked():
    job = make(tp=8, pp=4, num_gpus=64)
    assert job.dp == 2 and job.world_size == 64 and job.num_microbatches == 32
    assert job.layers_per_stage == (24, 24, 24, 24)
    assert make(tp=8, pp=4, dp=2, num_gpus=64).dp == 2


@pytest.mark.parametrize(
    ("kw", "field", "words"),
    [
        ({"tp": 8, "pp": 4, "dp": 4, "num_gpus": 64}, "num_gpus", "≠ 64"),
        ({"tp": 8, "pp": 3, "num_gpus": 64}, "num_gpus", "not divisible"),
        ({"tp": 5, "num_gpus": 60, "global_batch_size": 60}, "parallelism.tp", "heads"),
        ({"tp": 8, "pp": 5, "num_gpus": 40, "global_batch_size": 40}, "model.num_layers", "pp·vpp"),
        ({"tp": 8, "num_gpus": 64, "global_batch_size": 100}, "training.global_batch_size", "micro batch × dp"),
        ({"tp": 8, "cp": 2, "num_gpus": 64, "seq_length": 2046}, "training.seq_length", "2·cp"),
        ({"tp": 8, "pp": 2, "num_gpus": 64, "zero_stage": 2}, "training.zero_stage", "pipeline"),
        ({"tp": 8, "num_gpus": 64, "precision": "fp8"}, "training.precision", "FP8"),
        ({"tp": 8, "num_gpus": 64, "overlap_param_gather": True}, "training.overlap_param_gather", "distributed"),
        ({"tp": 8, "num_gpus": 64, "tp_comm_overlap": True}, "training.tp_comm_overlap", "sequence"),
        ({"tp": 8, "pp": 2, "vpp": 2, "schedule": "1f1b", "num_gpus": 64}, "parallelism.schedule", "interleaved"),
        ({"tp": 8, "vpp": 2, "num_gpus": 64}, "parallelism.vpp", "pipeline"),
        ({"tp": 8, "ep": 2, "num_gpus": 64}, "parallelism.ep", "no experts"),
    ],
)
def test_inconsistent_jobs_are_rejected_with_the_field_and_a_fix(kw, field, words):
    with pytest.raises(TrainsimError) as exc:
        make(**kw)
    assert exc.value.field == field
    assert words in exc.value.message
    assert exc.value.hint


def test_query_groups_must_divide_tp():
    with pytest.raises(TrainsimError) as exc:
        make(model="llama3-8b", system="dgx-h100", tp=16, num_gpus=16, global_batch_size=16)
    assert exc.value.field == "parallelism.tp"


def test_expert_parallel_must_divide_dp_cp():
    with pytest.raises(TrainsimError) as exc:
        make(model="mixtral-8x7b", system="dgx-h100", tp=2, ep=8, num_gpus=8, global_batch_size=8)
    assert exc.value.field == "parallelism.ep"
    assert make(model="mixtral-8x7b", system="dgx-h100", tp=2, ep=4, num_gpus=8, global_batch_size=8,
                sequence_parallel=True).dp == 4


def test_tensor_parallelism_across_nodes_is_allowed_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = make(tp=16, num_gpus=64)
    assert job.dp == 4
    assert any(issubclass(w.category, TrainsimWarning) and "spans nodes" in str(w.message) for w in caught)


def test_uneven_first_and_last_stages():
    job = make(model="llama3-405b", system="dgx-h100", tp=8, pp=8, num_gpus=64, first_stage_layers=14,
               last_stage_layers=16, global_batch_size=64)
    assert job.layers_per_stage == (14, 16, 16, 16, 16, 16, 16, 16)
    with pytest.raises(TrainsimError) as exc:
        make(model="llama3-405b", system="dgx-h100", tp=8, pp=8, num_gpus=64, first_stage_layers=15,
             last_stage_layers=14, global_batch_size=64)
    assert exc.value.field == "parallelism.first_stage_layers"


def test_interleaving_is_the_default_schedule_with_virtual_stages():
    assert make(tp=8, pp=4, vpp=3, num_gpus=64).schedule == "interleaved"
    assert make(tp=8, pp=4, num_gpus=64).schedule == "1f1b"
