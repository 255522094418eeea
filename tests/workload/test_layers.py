from trainsim.spec import load_model
from trainsim.workload.flops import layer_forward_flops
from trainsim.workload.layers import Shard, layer_work


def _gemm_flops(ops):
    return sum(o.flops for o in ops if o.kind in ("gemm", "attention"))


def test_layer_ops_reproduce_the_layer_flops_split_over_tensor_parallel_ranks():
    m = load_model("llama2-70b")
    for tp in (1, 8):
        w = layer_work(m, Shard(micro_batch=2, seq=4096, tp=tp, attention="flash"))
        # flash attention skips the causal half; the model-FLOP count (megatron convention) does not
        expected = layer_forward_flops(m, 2 * 4096, 4096, "causal") / tp
        assert abs(_gemm_flops(w.fwd) / expected - 1) < 1e-9
        assert abs(_gemm_flops(w.bwd) / (2 * expected) - 1) < 0.05


def test_sequence_parallel_turns_all_reduce_into_gather_and_scatter():
    m = load_model("gpt3-175b")
    plain = layer_work(m, Shard(micro_batch=1, seq=2048, tp=8))
    sp = layer_work(m, Shard(micro_batch=1, seq=2048, tp=8, sequence_parallel=True))
    assert [c.collective for c in plain.comm_fwd] == ["all_reduce", "all_reduce"]
    assert sorted(c.collective for c in sp.comm_fwd) == ["all_gather", "all_gather", "reduce_scatter",
                                                         "reduce_scatter"]
    assert sum(c.nbytes for c in sp.comm_fwd) == 2 * sum(c.nbytes for c in plain.comm_fwd)


def test_full_recompute_repeats_the_forward():
    m = load_model("gpt3-175b")
    w = layer_work(m, Shard(micro_batch=1, seq=2048, tp=8, recompute="full"))
    assert w.recompute == w.fwd and w.comm_recompute == w.comm_fwd


def test_context_parallel_adds_a_kv_ring():
    m = load_model("llama3-8b")
    w = layer_work(m, Shard(micro_batch=1, seq=8192, tp=1, cp=4))
    ring = [c for c in w.comm_fwd if c.group == "cp"]
    assert len(ring) == 1 and ring[0].collective == "send_recv"
    assert ring[0].nbytes == 3 * 2 * (8192 // 4) * 8 * 128 * 2  # (cp-1) blocks of K and V


def test_all_to_all_context_parallel_exchanges_heads_for_the_sequence():
    """--cp-comm-type a2a (Ulysses): Q/K/V in and the output back, each an all-to-all of the local sequence shard;
    the attention runs the whole sequence for heads/cp heads - the same attention FLOPs as the ring."""
    m = load_model("llama3-8b")
    ring = layer_work(m, Shard(micro_batch=1, seq=8192, tp=1, cp=4, attention="flash"))
    a2a = layer_work(m, Shard(micro_batch=1, seq=8192, tp=1, cp=4, attention="flash", cp_comm="a2a"))
    ops = [c for c in a2a.comm_fwd + a2a.comm_bwd if c.group == "cp"]
    assert [c.collective for c in ops] == ["all_to_all"] * 4
    d, heads, groups = m.head_dim, m.num_attention_heads, m.query_groups
    assert ops[0].nbytes == (8192 // 4) * (heads + 2 * groups) * d * 2  # Q, K, V of the local tokens, bf16
    assert ops[1].nbytes == (8192 // 4) * heads * d * 2
    attn = next(o for o in a2a.fwd if o.kind == "attention")
    assert attn.attn is not None and attn.attn[1] == heads // 4 and attn.attn[2] == 8192
    assert _gemm_flops(a2a.fwd) == _gemm_flops(ring.fwd)


def test_hierarchical_context_parallel_all_to_all_inside_a_level_then_a_ring_across_levels():
    """--cp-comm-type a2a+p2p (TE's hierarchical CP): Q/K/V all-to-all over the a adjacent CP ranks of a level (the
    same bytes per GPU as flat a2a), then the K/V ring over the cp/a levels (blocks of the flat ring's size); the
    attention runs a·s/cp queries for heads/a heads: the same FLOPs as either flat form."""
    from trainsim.parallel.axes import Group

    m = load_model("llama3-8b")
    shard = dict(micro_batch=1, seq=16384, tp=1, cp=8, attention="flash")
    ring = layer_work(m, Shard(**shard))
    flat = layer_work(m, Shard(**shard, cp_comm="a2a"))
    hier = layer_work(m, Shard(**shard, cp_comm="a2a+p2p", cp_a2a=2))
    ops = hier.comm_fwd + hier.comm_bwd
    a2a = [c for c in ops if c.group == Group.CP_A2A]
    p2p = [c for c in ops if c.group == Group.CP_P2P]
    assert not [c for c in ops if c.group == Group.CP]
    assert [c.collective for c in a2a] == ["all_to_all"] * 4 and [c.collective for c in p2p] == ["send_recv"] * 2
    flat_a2a = [c for c in flat.comm_fwd + flat.comm_bwd if c.group == Group.CP]
    assert [c.nbytes for c in a2a] == [c.nbytes for c in flat_a2a]
    kv_block = 2 * (16384 // 8) * m.query_groups * m.head_dim * 2
    assert p2p[0].nbytes == 3 * kv_block and p2p[1].nbytes == 2 * 3 * kv_block  # 4 levels: 3 ring steps
    assert p2p[0].overlap.name == "COMPUTE"  # hidden under the flash kernel, as the flat ring
    attn = next(o for o in hier.fwd if o.kind == "attention")
    assert attn.attn is not None and attn.attn[1] == m.num_attention_heads // 2 and attn.attn[2] == 16384 * 2 // 8
    assert _gemm_flops(hier.fwd) == _gemm_flops(ring.fwd) == _gemm_flops(flat.fwd)  # GEMMs and attention


def test_fp8_linears_quantize_their_output_gradients_in_backward():
    """Transformer Engine casts every FP8 linear's grad_output (with its transpose) before the dgrad/wgrad GEMMs: one
    backward cast per linear, sized by the linear's output, priced with the recipe's bytes per element."""
    from trainsim.workload.fp8 import recipe_cost

    m = load_model("llama3-8b")
    fp8 = Shard(micro_batch=1, seq=4096, precision="fp8")
    bf16 = Shard(micro_batch=1, seq=4096, precision="bf16")
    casts = [op for op in layer_work(m, fp8, False).bwd if op.name == "fp8_grad_cast"]
    assert len(casts) == 4  # qkv, attention projection, fc1 (gate and up), fc2
    h, d = m.hidden_size, m.head_dim
    out = (m.num_attention_heads + 2 * m.query_groups) * d + h + 2 * m.ffn_size + h
    assert sum(op.bytes for op in casts) == 4096 * out * recipe_cost("delayed").cast_bytes
    assert not [op for op in layer_work(m, bf16, False).bwd if op.name == "fp8_grad_cast"]


def test_every_pipeline_engine_sends_each_tp_ranks_share():
    """Megatron's engines send 1/tp of the replicated hidden states (scatter/gather), and so does DeepSpeed's pipe
    engine (is_pipe_partitioned: a PartitionedTensor over the slice-parallel group); a sequence-parallel tensor is
    split already."""
    from trainsim.spec import Job, Parallelism, Training, load_system
    from trainsim.workload.layers import shard_of

    def p2p(framework: str, sp: bool = False) -> float:
        job = Job(model=load_model("gpt3-175b"), system=load_system("dgx-a100"), num_gpus=64, framework=framework,
                  parallelism=Parallelism(tp=8, pp=8, sequence_parallel=sp),
                  training=Training(global_batch_size=64, seq_length=2048))
        return shard_of(job).p2p_bytes(job.model.hidden_size)

    tokens_h_bytes = 2048 * 12288 * 2
    assert p2p("megatron-core") == tokens_h_bytes / 8
    assert p2p("megatron-deepspeed") == tokens_h_bytes / 8
    assert p2p("megatron-core", sp=True) == p2p("megatron-deepspeed", sp=True) == tokens_h_bytes / 8


def test_squared_relu_runs_eager_under_megatron_and_fused_when_compiled():
    """Megatron-Core fuses only GELU and SwiGLU with their bias: relu(x)² is two eager kernels each way (4 and 6
    bytes-passes per element against the fused GELU's 2 and 3); torch.compile fuses the chain."""
    from trainsim.spec.model import Model
    from trainsim.workload.fusion import DEFAULT_FUSION, Fusion, activation_bytes

    gelu = Model(name="g", num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000,
                 add_bias_linear=False)
    relu2 = gelu.replace(activation="squared_relu")
    shard = Shard(micro_batch=1, seq=512)

    def act(m):
        w = layer_work(m, shard)
        return [o for o in (*w.fwd, *w.bwd) if o.name.startswith("mlp_") and o.kind == "elementwise"
                and ("gelu" in o.name or "relu" in o.name)]

    g, r = act(gelu), act(relu2)
    assert [o.name for o in r] == ["mlp_squared_relu", "mlp_squared_relu_grad"]
    assert r[0].bytes == 2 * g[0].bytes and r[1].bytes == 2 * g[1].bytes
    assert activation_bytes(Fusion(compiled=True), 2.0, "squared_relu", False) == activation_bytes(
        DEFAULT_FUSION, 2.0, "gelu", False)


def test_a_gated_mlp_has_no_other_activation():
    import pytest

    from trainsim.errors import TrainsimError
    from trainsim.spec.model import Model

    with pytest.raises(TrainsimError, match=r"model\.activation"):
        Model(name="x", num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000, swiglu=True,
              activation="squared_relu")


def test_fp8_sequence_parallel_gathers_move_the_quantized_tensor_where_the_stack_does():
    """Transformer Engine gathers the FP8 norm output and the FP8 output gradient (``both``); torchtitan's Float8
    tensorwise TP plan only the column-parallel inputs (``forward``); block-scaled recipes and 16-bit runs gather
    16-bit tensors; reduce-scatters stay 16-bit."""
    m = load_model("llama3-70b")

    def gathers(fp8_tp_gather: str, precision: str = "fp8", recipe: str | None = None) -> tuple[float, float]:
        w = layer_work(m, Shard(micro_batch=1, seq=4096, tp=8, sequence_parallel=True, precision=precision,
                                fp8_recipe=recipe, fp8_tp_gather=fp8_tp_gather))
        fwd = sum(c.nbytes for c in w.comm_fwd if c.collective == "all_gather")
        grad = sum(c.nbytes for c in w.comm_bwd if c.collective == "all_gather" and "regather" not in c.name)
        assert sum(c.nbytes for c in w.comm_fwd if c.collective == "reduce_scatter") == 2 * 4096 * 8192 * 2
        return fwd, grad

    bf16 = gathers("none", "bf16")
    assert gathers("both") == (bf16[0] / 2, bf16[1] / 2)
    assert gathers("forward") == (bf16[0] / 2, bf16[1])
    assert gathers("none") == bf16


def test_the_stacks_fp8_gathers_apply_to_per_tensor_recipes_only():
    from trainsim.spec import Job, Parallelism, Training, load_system
    from trainsim.workload.layers import shard_of

    def shard(framework: str, recipe: str | None, system: str = "dgx-h100") -> Shard:
        return shard_of(Job(model=load_model("llama3-70b"), system=load_system(system),
                            parallelism=Parallelism(tp=8, sequence_parallel=True),
                            training=Training(global_batch_size=8, precision="fp8", fp8_recipe=recipe),
                            num_gpus=8, framework=framework))

    assert shard("megatron-core", None).fp8_tp_gather == "both"
    assert shard("torchtitan", "tensorwise").fp8_tp_gather == "forward"
    assert shard("megatron-core", "blockwise").fp8_tp_gather == "none"
    assert shard("megatron-core", "mxfp8", "dgx-b200").fp8_tp_gather == "none"
