"""Meta's Llama 3 405B configurations (paper section 3.3, Table 4) and the layer-split rules of the profiles:
per-chunk layer counts as Megatron-Core, torchtitan and Meta compute them, the meta-llama3 profile, both engines
and memory on the published plans."""

from __future__ import annotations

import json

import pytest
from tests.cli_helpers import run

import trainsim
from trainsim.errors import TrainsimError
from trainsim.spec import Job, Parallelism, Training, load_model, load_system
from trainsim.spec.framework import load_framework
from trainsim.spec.pipeline_split import virtual_stage_layers
from trainsim.workload.layers import shard_of
from trainsim.workload.memory import layer_activation_bytes, memory_per_stage

META = {"tp": 8, "pp": 16, "sequence_parallel": True}


def meta_job(vpp=2, num_gpus=8192, gbs=2048, framework="meta-llama3", **par):  # type: ignore[no-untyped-def]
    return Job(model=load_model("llama3-405b"), system=load_system("dgx-h100"),
               parallelism=Parallelism(**{**META, "vpp": vpp, **par}),
               training=Training(global_batch_size=gbs, micro_batch_size=1, seq_length=8192),
               num_gpus=num_gpus, framework=framework)


def chunks(vsl, pp, rank):  # type: ignore[no-untyped-def]
    return list(vsl[rank::pp])


def test_megatron_core_account_for_embedding_and_loss_with_virtual_stages():
    # get_num_layers_to_build: (126 + 2) / 16 = 8 per rank, / vpp 2 = 4 per chunk; the first virtual stage
    # (chunk 0 of rank 0) and the last (chunk 1 of rank 15) build one layer less
    par = Parallelism(pp=16, vpp=2, account_for_embedding_in_pipeline_split=True,
                      account_for_loss_in_pipeline_split=True)
    vsl = virtual_stage_layers(126, par)
    assert chunks(vsl, 16, 0) == [3, 4] and chunks(vsl, 16, 15) == [4, 3]
    assert all(chunks(vsl, 16, r) == [4, 4] for r in range(1, 15)) and sum(vsl) == 126


def test_megatron_refuses_what_megatron_core_refuses():
    with pytest.raises(TrainsimError, match="not divisible by pp·vpp") as err:
        virtual_stage_layers(126, Parallelism(pp=16, vpp=2))
    assert "account-for" in err.value.hint
    with pytest.raises(TrainsimError, match="divide by 2") as err:
        virtual_stage_layers(126, Parallelism(pp=16, vpp=2, first_stage_layers=7, last_stage_layers=7))
    assert "account-for" in err.value.hint
    with pytest.raises(TrainsimError, match="not divisible"):
        meta_job(framework="megatron-core")


def test_torchtitan_split_weighs_embedding_and_output_as_one_layer_each():
    # generate_llm_fqn_per_model_part(stages, layers, 1, 1): layers + 2 slots, the first (slots mod stages) stages
    # one more, the first and last stage one layer less
    assert virtual_stage_layers(126, Parallelism(pp=16), "account-for-embedding-and-loss") == (7,) + (8,) * 14 + (7,)
    assert virtual_stage_layers(32, Parallelism(pp=4), "account-for-embedding-and-loss") == (8, 9, 8, 7)
    vsl = virtual_stage_layers(126, Parallelism(pp=16, vpp=8), "account-for-embedding-and-loss")
    # Llama 3: "the first model chunk on the first stage has only the embedding, and the last model chunk on the
    # last stage has only output projection and loss calculation"
    assert vsl[0] == 0 and vsl[-1] == 0 and set(vsl[1:-1]) == {1}
    assert virtual_stage_layers(126, Parallelism(pp=16, vpp=2), "account-for-embedding-and-loss") == \
        virtual_stage_layers(126, Parallelism(pp=16, vpp=2, account_for_embedding_in_pipeline_split=True,
                                              account_for_loss_in_pipeline_split=True))
    with pytest.raises(TrainsimError, match="cannot fill"):
        virtual_stage_layers(4, Parallelism(pp=4, vpp=2), "account-for-embedding-and-loss")


def test_deepspeed_balanced_partition_of_transformer_layers():
    # deepspeed.runtime.utils.partition_balanced: smallest bottleneck, then every stage filled up to it from the first
    assert virtual_stage_layers(30, Parallelism(pp=4), "type:transformer") == (8, 8, 8, 6)
    assert virtual_stage_layers(70, Parallelism(pp=12), "type:transformer") == (6,) * 11 + (4,)  # BLOOM 176B
    assert virtual_stage_layers(80, Parallelism(pp=3), "type:transformer") == (27, 27, 26)
    assert virtual_stage_layers(96, Parallelism(pp=8), "parameters") == (12,) * 8
    with pytest.raises(TrainsimError, match="without a transformer layer"):
        virtual_stage_layers(9, Parallelism(pp=6), "type:transformer")  # DeepSpeed would leave the last one empty


def test_uneven_first_last_with_virtual_stages_outside_megatron():
    # a module-list engine spreads a rank's 7 layers over its 2 chunks: the short chunk next to the embedding (first
    # rank) or the loss (last rank)
    vsl = virtual_stage_layers(126, Parallelism(pp=16, vpp=2, first_stage_layers=7, last_stage_layers=7),
                               "even", "torch-pipelining")
    assert chunks(vsl, 16, 0) == [3, 4] and chunks(vsl, 16, 15) == [4, 3] and sum(vsl) == 126


def test_meta_profile_loads_with_its_documented_fields():
    fw = load_framework("meta-llama3")
    assert fw.dp_engine == fw.sharded_engine == "fsdp1" and fw.default_zero_stage == 3
    assert not fw.reshard_after_forward and fw.shard_grads_with_pp and fw.grad_reduce_dtype == "fp32"
    assert fw.pipeline_layer_split == "account-for-embedding-and-loss" and fw.interleaved_schedule
    assert fw.attention_backend == "flash" and not fw.dropout and fw.supports_cp and not fw.supports_ep
    assert "Llama 3" in fw.sources["reshard_after_forward"] or "reshard" in fw.sources["reshard_after_forward"]


@pytest.mark.parametrize("vpp", [1, 2, 4, 8])
def test_meta_405b_is_accepted_and_chunks_follow_the_split(vpp):
    j = meta_job(vpp=vpp)
    assert j.training.zero_stage == 3 and j.dp == 64 and j.num_microbatches == 32
    vsl = j.virtual_stage_layers
    assert len(vsl) == 16 * vpp and sum(vsl) == 126
    assert j.layers_per_stage[0] == j.layers_per_stage[15] == 7 and set(j.layers_per_stage[1:15]) == {8}


def test_meta_405b_with_the_7_7_split_and_virtual_stages():
    j = meta_job(vpp=2, first_stage_layers=7, last_stage_layers=7)
    assert chunks(j.virtual_stage_layers, 16, 0) == [3, 4] and chunks(j.virtual_stage_layers, 16, 15) == [4, 3]


def test_meta_memory_keeps_gradients_sharded_and_the_published_plan_fits():
    j = meta_job(vpp=1)
    mem = memory_per_stage(j)
    tt = memory_per_stage(meta_job(vpp=1, framework="torchtitan"))
    # "shards optimizer states and gradients": fp32 gradients over dp = 64, not the unsharded accumulation buffer
    assert mem[1].gradients_bytes == pytest.approx(tt[1].gradients_bytes / 64)
    assert mem[1].weights_bytes == tt[1].weights_bytes  # parameters kept gathered (no reshard after forward)
    assert max(s.required_bytes for s in mem) <= j.system.gpu.hbm_capacity


@pytest.mark.parametrize("vpp", [2, 8])
def test_engines_agree_on_the_meta_plan(vpp):
    # vpp 8: rank 0's first chunk holds only the embedding (0 layers), rank 15's last only the loss
    j = meta_job(vpp=vpp, num_gpus=512, gbs=128)  # dp 4, 32 micro-batches: the event engine simulates one replica
    a = trainsim.predict(j, engine="analytic")
    e = trainsim.predict(j, engine="event")
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.1)
    assert e.memory.peak_bytes == a.memory.peak_bytes


def test_layer_activations_follow_korthikanti_adapted_to_swiglu_gqa_and_flash():
    # per token and layer, sequence-parallel shards of 1/t: norm input and output 2h + 2h (attention and MLP each),
    # Q 2h, K and V 2·2·(8 heads · 128) = h/4, the flash output 2h, fc1's gate and up 4·ffn, SwiGLU's output 2·ffn:
    # 31.75·h with ffn = 3.25·h; no s² term (flash), no dropout masks (Llama has none)
    j = meta_job(vpp=8)
    m = j.model
    assert m.ffn_hidden_size == 3.25 * m.hidden_size
    expected = 31.75 * m.hidden_size * 8192 / 8
    assert layer_activation_bytes(m, shard_of(j)) == pytest.approx(expected, rel=1e-3)


def test_interleaving_warm_up_decides_which_meta_plans_fit():
    # Megatron-Core's warm-up: rank s holds min(2(pp − s − 1) + (V − 1)·pp + 1, M·V) chunks: about
    # L·(1 + (pp − 2)/(pp·V)) layer-micro-batches on the first ranks, so fewer with more chunks
    act = {v: max(s.activations_bytes for s in memory_per_stage(meta_job(vpp=v))) for v in (2, 4, 8)}
    assert act[8] < act[4] < act[2]
    per_layer = layer_activation_bytes(meta_job(vpp=8).model, shard_of(meta_job(vpp=8)))
    assert act[8] / per_layer == pytest.approx(2 * 14 + 7 * 16 + 1)  # rank 1: 141 one-layer chunks in flight
    # the documented V = 8 ("the first model chunk on the first stage has only the embedding") fits at 8K and 16K
    for gpus in (8192, 16384):
        j = meta_job(vpp=8, num_gpus=gpus)
        assert max(s.required_bytes for s in memory_per_stage(j)) <= j.system.gpu.hbm_capacity


def test_meta_long_context_plan_with_context_parallelism_fits():
    # Table 4: 16,384 GPUs, TP 8, CP 16, PP 16, DP 8, sequence 131,072, 16M tokens per batch
    j = Job(model=load_model("llama3-405b"), system=load_system("dgx-h100"),
            parallelism=Parallelism(tp=8, pp=16, cp=16, vpp=8, sequence_parallel=True),
            training=Training(global_batch_size=128, micro_batch_size=1, seq_length=131072), num_gpus=16384,
            framework="meta-llama3")
    assert j.dp == 8 and j.num_microbatches == 16
    assert max(s.required_bytes for s in memory_per_stage(j)) <= j.system.gpu.hbm_capacity


@pytest.mark.parametrize(("system", "num_gpus", "gbs"), [("hgx-h200", 128, 64), ("dgx-h100", 1024, 512)])
def test_nemo_405b_recipe_with_uneven_virtual_stages_is_accepted_and_fits(system, num_gpus, gbs):
    # NeMo's Llama 3.1 405B performance recipe: TP 8, PP 8, CP 2, VP 8, MBS 1, sequence 8192, with the embedding and
    # the loss counted as a layer of the first/last virtual stage (126 + 2 = 128 slots over 64 virtual stages)
    j = Job(model=load_model("llama3-405b"), system=load_system(system),
            parallelism=Parallelism(tp=8, pp=8, cp=2, vpp=8, sequence_parallel=True,
                                    account_for_embedding_in_pipeline_split=True,
                                    account_for_loss_in_pipeline_split=True),
            training=Training(global_batch_size=gbs, micro_batch_size=1, seq_length=8192), num_gpus=num_gpus,
            framework="nemo")
    vsl = j.virtual_stage_layers
    assert vsl[0] == vsl[-1] == 1 and set(vsl[1:-1]) == {2}
    assert max(s.required_bytes for s in memory_per_stage(j)) <= j.system.gpu.hbm_capacity


def test_python_api_and_cli_accept_the_meta_plan(capsys):
    p = trainsim.predict("llama3-405b", system="dgx-h100", framework="meta-llama3", tp=8, pp=16, vpp=2,
                         num_gpus=8192, seq_length=8192, global_batch_size=2048, micro_batch_size=1,
                         sequence_parallel=True)
    assert p.job["framework"]["name"] == "meta-llama3" and p.iteration_time_s > 0
    code, out, err = run(["predict", "-m", "llama3-405b", "-s", "dgx-h100", "--framework", "meta-llama3",
                          "--tp", "8", "--pp", "16", "--vpp", "2", "--num-gpus", "8192", "--seq-length", "8192",
                          "--gbs", "2048", "--mbs", "1", "--sequence-parallel", "--decoder-first-pipeline-num-layers",
                          "7", "--decoder-last-pipeline-num-layers", "7", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["job"]["framework"]["name"] == "meta-llama3"


def test_all_gather_context_parallelism_is_exposed_where_the_ring_hides():
    # Llama 3 §3.3.2: K/V all-gathered before the local queries' attention, "exposed in the critical path"
    # (Transformer Engine's AttnFuncWithCPAndKVAllGather: re-gathered in backward, dK/dV reduce-scattered)
    def cp_time(framework):  # type: ignore[no-untyped-def]
        j = Job(model=load_model("llama3-405b"), system=load_system("dgx-h100"),
                parallelism=Parallelism(tp=8, pp=16, cp=16, vpp=8, sequence_parallel=True),
                training=Training(global_batch_size=128, micro_batch_size=1, seq_length=131072), num_gpus=16384,
                framework=framework)
        return trainsim.predict(j).breakdown_s["cp_comm"]

    assert load_framework("meta-llama3").cp_comm_type == "allgather"
    allgather = cp_time("meta-llama3")
    ring = cp_time({"name": "meta-llama3", "cp_comm_type": "p2p"})
    assert allgather > 0.1 and allgather > 10 * ring


def test_deepspeed_balanced_partition_reaches_the_smallest_bottleneck():
    """Every accepted split holds all layers with ceil(L/pp) on the most loaded stage (DeepSpeed's binary search can
    land exactly on that bottleneck, where its probe fills the first stages one layer short: 4 over 3 is 1, 1, 2)."""
    for layers in range(1, 61):
        for pp in range(1, 17):
            try:
                counts = virtual_stage_layers(layers, Parallelism(pp=pp), "type:transformer")
            except TrainsimError:
                # refused only where filling ceil(L/pp) per stage from the first leaves the last one empty
                assert layers < pp or -(-layers // pp) * (pp - 1) >= layers
                continue
            assert sum(counts) == layers and max(counts) == -(-layers // pp) and min(counts) >= 1
    assert virtual_stage_layers(4, Parallelism(pp=3), "type:transformer") == (1, 1, 2)
