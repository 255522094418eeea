"""MoE layer work: token counts with imbalance and capacity, MLA FLOPs, local attention, MTP, FP8 recipes."""

import dataclasses

import pytest

from trainsim.spec import load_model
from trainsim.workload.flops import layer_forward_flops, model_forward_flops
from trainsim.workload.layers import Shard, head_work, layer_work, moe_expert_tokens
from trainsim.workload.memory import layer_activation_bytes


def _ops(work, prefix):
    return [op for op in (*work.fwd, *work.bwd) if op.name.startswith(prefix)]


def test_expert_rows_fold_imbalance_capacity_and_etp():
    m = load_model("mixtral-8x7b")
    shard = Shard(micro_batch=1, seq=4096, tp=2, ep=8, etp=1, sequence_parallel=True)
    copies, rows = moe_expert_tokens(m, shard)
    assert copies == 4096 * 2 / 2 and rows == copies * 1  # etp 1: no expert-TP gather
    hot = m.replace(moe_load_imbalance=1.5)
    assert moe_expert_tokens(hot, shard)[1] == pytest.approx(1.5 * rows)
    capped = hot.replace(moe_expert_capacity_factor=1.25)  # tokens above capacity are dropped
    assert moe_expert_tokens(capped, shard)[1] == pytest.approx(1.25 * rows)
    work = layer_work(hot, dataclasses.replace(shard, ep=8), True)
    a2a = next(c for c in work.comm_fwd if c.name == "moe_dispatch")
    assert a2a.nbytes == pytest.approx(1.5 * copies * m.hidden_size * 2)  # the busiest receiver sets the pace


def test_expert_tp_adds_gather_and_narrows_the_gemms():
    m = load_model("qwen3-30b-a3b")
    base = Shard(micro_batch=1, seq=4096, tp=2, ep=8, sequence_parallel=True)  # etp = tp = 2
    folded = dataclasses.replace(base, etp=1)
    w2, w1 = layer_work(m, base, True), layer_work(m, folded, True)
    assert any(c.group == "etp" for c in w2.comm_fwd) and not any(c.group == "etp" for c in w1.comm_fwd)
    fc1_2 = next(op for op in w2.fwd if op.name == "expert_fc1")
    fc1_1 = next(op for op in w1.fwd if op.name == "expert_fc1")
    assert fc1_2.n * 2 == fc1_1.n and fc1_2.flops == pytest.approx(fc1_1.flops, rel=0.01)


def test_mla_flops_per_token_match_the_active_parameters():
    """DeepSeek-V3: 3 × forward FLOPs per token ≈ 6 × the activated matmul parameters plus attention scores."""
    m = load_model("deepseek-v3")
    seq = 4096
    fwd = model_forward_flops(m, 1.0, seq) - model_forward_flops(m.replace(mtp_num_layers=0), 1.0, seq)
    assert fwd > 0  # the MTP module costs one more layer and head
    dense = m.replace(mtp_num_layers=0)
    per_token = model_forward_flops(dense, 1.0, seq)
    scores = 61 * 2 * seq * 128 * (192 + 128)  # QKᵀ over 192-wide heads, PV over 128-wide, full square
    active_matmul = dense.num_active_params - dense.embedding_params
    assert per_token - scores == pytest.approx(2 * active_matmul, rel=0.01)


def test_mla_layer_has_latent_projections_and_recompute_option():
    m = load_model("deepseek-v3")
    shard = Shard(micro_batch=1, seq=4096, tp=2, ep=8, sequence_parallel=True)
    work = layer_work(m, shard, True)
    names = {op.name for op in work.fwd}
    assert {"q_down", "q_norm", "q_up", "kv_down", "kv_norm", "kv_up"} <= names
    up = dataclasses.replace(shard, recompute_modules=("mla_up_proj",))
    assert {op.name for op in layer_work(m, up, True).recompute} == {"q_up", "kv_up"}
    keep = layer_activation_bytes(m, shard, True)
    drop = layer_activation_bytes(m, up, True)
    assert drop < keep  # Q, K and V of the 64 local heads are not stored


def test_sliding_window_cuts_attention_work():
    oss = load_model("gpt-oss-120b")
    full = oss.replace(local_attention="none")
    seq = 4096
    assert oss.local_attention_layers == 18
    # half the layers attend to 128 keys instead of ~2048 on average
    assert oss.attention_span(seq) == pytest.approx(0.5 + 0.5 * (128 - 127 * 128 / 2 / seq) / ((seq + 1) / 2),
                                                    rel=1e-6)
    assert layer_forward_flops(oss, 1.0, seq) < layer_forward_flops(full, 1.0, seq)


def test_mtp_runs_with_the_head():
    m = load_model("deepseek-v3")
    shard = Shard(micro_batch=1, seq=4096, ep=32)
    head = head_work(m, shard)
    assert "mtp" in head.tags and any(op.name == "mtp_eh_proj" for op in head.fwd)
    assert len(_ops(head, "mtp_lm_head")) == 3  # forward, data and weight gradients


@pytest.mark.parametrize(("recipe", "cast"), [("delayed", 4.0), ("tensorwise", 6.0), ("mxfp8", 2 + 2 * (1 + 1 / 32))])
def test_fp8_recipe_cast_bytes(recipe, cast):
    m = load_model("mixtral-8x7b")
    shard = Shard(micro_batch=1, seq=4096, ep=8, precision="fp8", fp8_recipe=recipe)
    casts = [op for op in layer_work(m, shard, True).fwd if op.name == "fp8_cast"]
    first = casts[0]  # the QKV input: tokens × hidden
    assert first.bytes == pytest.approx(4096 * m.hidden_size * cast)


def test_flex_dispatcher_sends_a_token_once_per_node_over_the_network():
    """--moe-token-dispatcher-type flex (DeepEP / HybridEP): the dispatch and combine all-to-alls keep their bytes
    but only `nodes per token / topk` of their inter-node share crosses the network; inside one node nothing
    changes. The cost model applies the share to the network part only."""
    from trainsim.cost.calibration import calibration_for
    from trainsim.cost.comm import collective_time
    from trainsim.parallel.layout import Placement
    from trainsim.spec import load_system
    from trainsim.workload.routing import network_copy_ratio

    m = load_model("deepseek-v3")
    base = dict(micro_batch=1, seq=4096, tp=1, ep=64)
    a2a = layer_work(m, Shard(**base, ep_nodes=8), True)
    flex = layer_work(m, Shard(**base, ep_nodes=8, moe_dispatcher="flex"), True)
    local = layer_work(m, Shard(**base, ep_nodes=1, moe_dispatcher="flex"), True)

    def pick(w):  # type: ignore[no-untyped-def]
        return [c for c in w.comm_fwd + w.comm_bwd if c.name.startswith(("moe_dispatch", "moe_combine"))]

    assert len(pick(flex)) == 4 and [c.nbytes for c in pick(flex)] == [c.nbytes for c in pick(a2a)]
    assert {c.network_share for c in pick(a2a)} == {1.0} == {c.network_share for c in pick(local)}
    assert {c.network_share for c in pick(flex)} == {network_copy_ratio(m, 8)} and network_copy_ratio(m, 8) < 0.5
    system = load_system("dgx-h100")
    cal = calibration_for(system.gpu.generation)
    place = Placement(64, 8, 8)
    full = collective_time("all_to_all", 2e8, place, system, cal, 8)
    shared = collective_time("all_to_all", 2e8, place, system, cal, 8, network_share=0.5)
    latency = 63 * system.network.latency
    assert shared - latency == pytest.approx((full - latency) * 0.5, rel=1e-6)
    assert collective_time("all_to_all", 2e8, Placement(8, 8, 1), system, cal, 1, network_share=0.5) == \
        collective_time("all_to_all", 2e8, Placement(8, 8, 1), system, cal, 1)


def test_all_to_all_dispatcher_regroups_received_tokens_by_local_expert():
    """Megatron-Core's all-to-all dispatcher receives tokens grouped by source rank and sorts them by local expert
    after the dispatch, and back before the combine ("Permutation 2" / "Unpermutation 2"): a read and a write of
    every received row each way, forward and backward. Nothing to regroup with one local expert, without expert
    parallelism, or under the flex dispatcher (DeepEP's output is permuted once, the ordinary moe_permute)."""
    m = load_model("qwen3-30b-a3b")  # 128 experts
    shard = Shard(micro_batch=1, seq=4096, tp=1, ep=8)
    work = layer_work(m, shard, True)
    _, rows = moe_expert_tokens(m, shard)
    regroup = _ops(work, "moe_sort") + _ops(work, "moe_unsort")
    assert sorted(op.name for op in regroup) == ["moe_sort", "moe_sort_grad", "moe_unsort", "moe_unsort_grad"]
    assert [op.bytes for op in regroup] == pytest.approx([2 * rows * m.hidden_size * 2] * 4)
    names = [op.name for op in work.fwd]
    assert names.index("moe_permute") < names.index("moe_sort") < names.index("expert_fc1")
    assert names.index("expert_fc2") < names.index("moe_unsort") < names.index("moe_unpermute")
    one_local = m.replace(num_experts=8)  # ep 8: one expert per GPU
    for w in (layer_work(m, dataclasses.replace(shard, ep=1), True),
              layer_work(m, dataclasses.replace(shard, moe_dispatcher="flex"), True),
              layer_work(one_local, shard, True)):
        assert not _ops(w, "moe_sort") and not _ops(w, "moe_unsort")


def test_megatron_recompute_modules_checkpoint_their_module():
    """--recompute-modules (Megatron-Core, selective granularity): a checkpointed MoE layer (`moe`) reruns its whole
    forward, all-to-alls included, and keeps only its input; `shared_experts` reruns the shared expert and its TP
    collectives; `mlp` the dense MLP; `layernorm` MLA's input norm and the MoE layer's pre-MLP norm (outputs
    discarded). Each saves activation memory and adds its forward to the recompute."""
    v3 = load_model("deepseek-v3")
    base = dict(micro_batch=1, seq=4096, tp=2, ep=8, sequence_parallel=True, recompute="selective")

    def work(moe: bool, *modules: str):  # type: ignore[no-untyped-def]
        shard = Shard(**base, recompute_modules=modules)
        return layer_work(v3, shard, moe), layer_activation_bytes(v3, shard, moe)

    (plain, mem), (moe, mem_moe) = work(True), work(True, "moe")
    assert not plain.recompute and not plain.comm_recompute
    assert {op.name for op in moe.recompute} >= {"moe_permute", "moe_unpermute"}
    assert {c.name for c in moe.comm_recompute} >= {"moe_dispatch", "moe_combine"}
    assert mem_moe < 0.5 * mem
    shared, mem_shared = work(True, "shared_experts")
    assert {op.name for op in shared.recompute if op.kind == "gemm"} == {"shared_expert_fc1", "shared_expert_fc2"}
    assert {c.name for c in shared.comm_recompute} <= {"shared_in", "shared_out"} and shared.comm_recompute
    assert mem_moe < mem_shared < mem
    dense, mem_dense = work(False)
    mlp, mem_mlp = work(False, "mlp")
    assert {op.name for op in mlp.recompute if op.kind == "gemm"} == {"mlp_fc1", "mlp_fc2"} and not dense.recompute
    assert mem_mlp < mem_dense
    norm, mem_norm = work(True, "layernorm")
    assert [op.name for op in norm.recompute] == ["input_norm", "mlp_norm"] and mem_norm < mem


def test_nvfp4_recipe_runs_the_linear_gemms_in_fp4_on_blackwell_only():
    """--fp8-recipe nvfp4 (Megatron's --fp4-format e2m1 --fp4-recipe nvfp4): the linear layers' GEMMs are FP4 (the
    attention and the LM head stay 16-bit), priced at the GPU's FP4 peak; the quantization moves an amax pass plus
    two 16-element-block copies; a GPU without FP4 tensor cores refuses it."""
    from trainsim.errors import TrainsimError
    from trainsim.spec import Job, Parallelism, Training, load_system
    from trainsim.workload.fp8 import recipe_cost
    from trainsim.workload.layers import head_work

    m = load_model("llama3-8b")
    fp4 = Shard(micro_batch=1, seq=4096, precision="fp8", fp8_recipe="nvfp4")
    assert fp4.gemm_dtype == "fp4" and recipe_cost("nvfp4").cast_bytes == 4.0 + 2 * (0.5 + 1 / 16)
    w = layer_work(m, fp4, False)
    assert {o.dtype for o in w.fwd if o.kind == "gemm"} == {"fp4"}
    assert {o.dtype for o in w.fwd if o.kind == "attention"} == {"bf16"}
    assert {o.dtype for o in head_work(m, fp4).fwd if o.kind == "gemm"} == {"bf16"}

    def job(system: str, recipe: str) -> Job:
        return Job(model=m, system=load_system(system), num_gpus=8, parallelism=Parallelism(),
                   training=Training(global_batch_size=8, precision="fp8", fp8_recipe=recipe))

    from trainsim.api import predict

    assert predict(job("dgx-b200", "nvfp4")).iteration_time_s < predict(job("dgx-b200", "mxfp8")).iteration_time_s
    with pytest.raises(TrainsimError, match="fp8_recipe"):
        job("dgx-h100", "nvfp4")
