"""Layer splits over pipeline ranks and virtual stages (Megatron-Core's rules), and the configurations that ran."""

import pytest

from trainsim.errors import TrainsimError
from trainsim.estimate import estimate
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.spec.pipeline_split import virtual_stage_layers
from trainsim.workload.memory import stage_memory
from trainsim.workload.stages import chunk_layer_indices


def make(model="llama3-405b", num_gpus=256, gbs=64, train=None, **par):
    return Job(model=load_model(model), system=load_system("dgx-h100"), parallelism=Parallelism(**par),
               training=Training(global_batch_size=gbs, **(train or {})), num_gpus=num_gpus)


def test_account_for_embedding_and_loss_with_virtual_stages():
    # NeMo's 405B recipe: 126 layers + embedding + loss = 128 over pp 8 × vpp 8 → 2 per virtual stage
    par = Parallelism(pp=8, vpp=8, account_for_embedding_in_pipeline_split=True,
                      account_for_loss_in_pipeline_split=True)
    vsl = virtual_stage_layers(126, par)
    assert len(vsl) == 64 and sum(vsl) == 126
    assert vsl[0] == 1 and vsl[-1] == 1 and set(vsl[1:-1]) == {2}


def test_uneven_first_last_stages_with_virtual_stages():
    vsl = virtual_stage_layers(16, Parallelism(pp=4, vpp=2, first_stage_layers=2, last_stage_layers=2))
    # rank r, chunk c at index c·pp + r; the first/last rank split 2 layers over 2 chunks, the middle ranks 6
    assert vsl == (1, 3, 3, 1, 1, 3, 3, 1)
    with pytest.raises(TrainsimError, match="divide by 2"):
        virtual_stage_layers(14, Parallelism(pp=4, vpp=2, first_stage_layers=2, last_stage_layers=2))


def test_layout_string():
    assert virtual_stage_layers(11, Parallelism(pp=4, pipeline_layout="Et*3|(tt|)*2t*4L")) == (3, 2, 2, 4)
    assert virtual_stage_layers(6, Parallelism(pp=2, vpp=2, pipeline_layout="E t | t t | tt | t L")) == (1, 2, 2, 1)
    with pytest.raises(TrainsimError, match="virtual stages"):
        virtual_stage_layers(4, Parallelism(pp=4, pipeline_layout="Et|t|tL"))
    with pytest.raises(TrainsimError, match="transformer layers"):
        virtual_stage_layers(5, Parallelism(pp=4, pipeline_layout="Et|t|t|tL"))
    with pytest.raises(ValueError, match="embedding"):
        Parallelism(pp=4, pipeline_layout="t|E|t|tL")


def test_layout_gives_the_virtual_stages_when_vpp_is_not_set():
    """As Megatron's arguments.py: --pipeline-model-parallel-layout alone sets the virtual stages per rank."""
    par = Parallelism(pp=8, pipeline_layout="Et|(tt|)*30L")
    assert par.vpp == 4 and virtual_stage_layers(61, par) == (1, *[2] * 30, 0)
    assert Parallelism(pp=2, vpp=2, pipeline_layout="E t | t t | tt | t L").vpp == 2
    with pytest.raises(TrainsimError, match="virtual stages"):  # 3 stages do not divide over pp = 2
        virtual_stage_layers(4, Parallelism(pp=2, pipeline_layout="Et|tt|tL"))


def test_chunks_hold_consecutive_blocks_in_virtual_stage_order():
    job = make(model="llama2-7b", num_gpus=8, gbs=8, pp=4, vpp=2,
               pipeline_layout="Et*3|t*5|t*5|t*5|t*5|t*5|t*3|tL", train={"micro_batch_size": 1})
    assert job.virtual_stage_layers == (3, 5, 5, 5, 5, 5, 3, 1)
    assert job.layers_per_stage == (8, 10, 8, 6)
    assert list(chunk_layer_indices(job, 0, 1)) == [18, 19, 20, 21, 22]
    assert list(chunk_layer_indices(job, 3, 1)) == [31]
    assert sum(len(chunk_layer_indices(job, s, c)) for s in range(4) for c in range(2)) == 32


def test_conflicting_split_options_are_refused():
    with pytest.raises(TrainsimError, match="account-for"):
        virtual_stage_layers(16, Parallelism(pp=4, first_stage_layers=2, account_for_loss_in_pipeline_split=True))
    with pytest.raises(TrainsimError, match="layout"):
        virtual_stage_layers(4, Parallelism(pp=4, first_stage_layers=1, pipeline_layout="Et|t|t|tL"))


def test_fsdp_style_sharding_with_pipeline_parallelism_is_accepted():
    # Llama 3 405B: FSDP-style sharding with PP 16 (parameters gathered once per step)
    job = make(num_gpus=1024, gbs=128, tp=8, pp=16, vpp=1, first_stage_layers=6, last_stage_layers=8,
               sequence_parallel=True, train={"zero_stage": 3, "recompute_granularity": "full"})
    assert sum(job.layers_per_stage) == 126
    z1 = make(num_gpus=1024, gbs=128, tp=8, pp=16, first_stage_layers=6, last_stage_layers=8,
              sequence_parallel=True, train={"zero_stage": 1, "recompute_granularity": "full"})
    # memory of the distributed optimizer: gathered bf16 weights and fp32 gradients through the step
    m3, m1 = stage_memory(job, 1), stage_memory(z1, 1)
    assert m3.weights_bytes == m1.weights_bytes and m3.gradients_bytes == m1.gradients_bytes
    assert m3.optimizer_bytes == m1.optimizer_bytes
    est = estimate(job)
    assert est.iteration_time_s > 0 and est.breakdown_s["dp_comm"] > 0
    with pytest.raises(TrainsimError, match="ZeRO stage 2"):
        make(num_gpus=1024, gbs=128, tp=8, pp=16, first_stage_layers=6, last_stage_layers=8,
             train={"zero_stage": 2})


def test_fsdp_with_tensor_and_context_parallelism():
    # torchtitan 3D: FSDP over dp·cp with TP inside the node
    job = make(model="llama3-70b", num_gpus=256, gbs=64, tp=8, cp=2,
               train={"zero_stage": 3, "seq_length": 16384})
    assert job.dp == 16
    est = estimate(job)
    assert est.breakdown_s["dp_comm"] > 0 and est.breakdown_s["cp_comm"] >= 0
