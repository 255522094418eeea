import pytest

from trainsim.workload.fusion import Fusion, dropout_add_bytes

torch = pytest.importorskip("torch")

from trainsim.errors import TrainsimError  # noqa: E402
from trainsim.profile import kernels as K  # noqa: E402
from trainsim.profile.builders import (  # noqa: E402
    BYTES_PER_ELEMENT,
    OpContext,
    build,
    build_optimizer_step,
    layer_parameter_shapes,
)
from trainsim.spec.model import Model  # noqa: E402
from trainsim.workload.layers import Shard, embedding_work, head_work, layer_work  # noqa: E402
from trainsim.workload.ops import Role, attention, elementwise, gemm  # noqa: E402

CPU = torch.device("cpu")

GPT = Model(name="gpt", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=300, seq_length=32)
LLAMA = Model(name="llama", num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
              ffn_hidden_size=96, vocab_size=300, seq_length=32, swiglu=True, normalization="RMSNorm",
              position_embedding_type="rope", add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0)
MOE = LLAMA.replace(name="moe", num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=48,
                    moe_shared_expert_intermediate_size=64)

MLA_MOE = LLAMA.replace(name="mla", multi_latent_attention=True, q_lora_rank=32, kv_lora_rank=16, qk_head_dim=16,
                        qk_pos_emb_head_dim=8, v_head_dim=16, num_experts=4, moe_router_topk=2,
                        moe_ffn_hidden_size=32, moe_shared_expert_intermediate_size=32, moe_first_k_dense=1,
                        mtp_num_layers=1)
QWEN3 = MOE.replace(name="qwen3", qk_layernorm=True, moe_shared_expert_intermediate_size=None)

NEMOTRON = GPT.replace(name="nemotron", activation="squared_relu", add_bias_linear=False,
                       position_embedding_type="rope")

CASES = [
    (NEMOTRON, Shard(micro_batch=1, seq=32, tp=2, sequence_parallel=True)),
    (NEMOTRON.replace(add_bias_linear=True), Shard(micro_batch=1, seq=32)),
    (MLA_MOE, Shard(micro_batch=1, seq=32, tp=2, ep=2, etp=1, sequence_parallel=True,
                    recompute_modules=("mla_up_proj", "moe_act"))),
    (QWEN3, Shard(micro_batch=1, seq=32, ep=2, precision="fp8", fp8_recipe="mxfp8")),
    (QWEN3, Shard(micro_batch=1, seq=32, precision="fp8", fp8_recipe="tensorwise")),
    (MLA_MOE, Shard(micro_batch=1, seq=32, precision="fp8", fp8_recipe="blockwise")),
    (GPT, Shard(micro_batch=2, seq=32)),
    (GPT, Shard(micro_batch=1, seq=32, attention="unfused", recompute="selective")),
    (LLAMA, Shard(micro_batch=2, seq=32, tp=2, sequence_parallel=True)),
    (LLAMA, Shard(micro_batch=1, seq=32, cp=2)),
    (MOE, Shard(micro_batch=1, seq=32, ep=2)),
    (GPT, Shard(micro_batch=1, seq=32, precision="fp32")),
    # a stack without Transformer Engine: bias gradients as reductions, transformers' F.cross_entropy
    (GPT, Shard(micro_batch=2, seq=32, tp=2, sequence_parallel=True,
                fusion=Fusion(bias_in_gemm=False, cross_entropy_impl="torch"))),
    # Megatron's local linears: fused QKV split into views, its own QKV bias add
    (GPT, Shard(micro_batch=2, seq=32, fusion=Fusion(bias_in_gemm=False, qkv_split=True))),
    (LLAMA, Shard(micro_batch=1, seq=32, tp=2, fusion=Fusion(qkv_split=True))),
    (LLAMA, Shard(micro_batch=1, seq=32, precision="fp16")),
]


def _all_ops(model, shard):
    works = [layer_work(model, shard, False), embedding_work(model, shard), head_work(model, shard)]
    if model.is_moe:
        works.append(layer_work(model, shard, True))
    seen = {}
    for w in works:
        for op in (*w.fwd, *w.bwd, *w.recompute):
            seen.setdefault(op.key, op)
    return list(seen.values())


@pytest.mark.parametrize(("model", "shard"), CASES)
def test_every_workload_op_has_a_dedicated_builder_with_the_workload_shape(model, shard):
    ctx = OpContext(CPU, model, shard)
    e = 4.0 if shard.precision == "fp32" else 2.0
    for op in _all_ops(model, shard):
        if op.kind == "gemm" and op.dtype == "fp8":
            continue  # FP8 GEMMs need a GPU (test_gemm_builders_use_the_linear_layouts checks the error)
        built = build(op, ctx)
        assert built.builder != "generic_copy", op.name
        if op.kind == "elementwise":
            per_element = BYTES_PER_ELEMENT[(built.kind, op.phase)](e)
            if built.kind == "bias_dropout_add":  # the mask byte only where dropout runs (trainsim.workload.fusion)
                fwd_b, bwd_b = dropout_add_bytes(shard.fusion, e, model.add_bias_linear, model.hidden_dropout > 0)
                per_element = fwd_b if op.phase == "fwd" else bwd_b
            assert built.elements * per_element == pytest.approx(op.bytes), op.name
        built.fn()  # runs


def test_gemm_builders_use_the_linear_layouts():
    ctx = OpContext(CPU, GPT, Shard(micro_batch=1, seq=32))
    assert build(gemm("qkv", "fwd", 8, 12, 16, "bf16"), ctx).fn().shape == (8, 12)
    assert build(gemm("qkv_dgrad", "bwd", 8, 16, 12, "bf16"), ctx).fn().shape == (8, 16)
    out = build(gemm("qkv_wgrad", "bwd", 16, 12, 8, "bf16", role=Role.WEIGHT_GRAD), ctx).fn()
    assert out.shape == (12, 16) and out.dtype == torch.bfloat16  # dW[out, in] = dYᵀ·X
    assert build(gemm("attn_qk", "fwd", 8, 8, 4, "fp32", batch=3), ctx).fn().shape == (3, 8, 8)
    assert build(gemm("expert_fc1_wgrad", "bwd", 4, 6, 8, "bf16", batch=3, role=Role.WEIGHT_GRAD),
                 ctx).fn().shape == (3, 6, 4)
    tf32 = build(gemm("qkv", "fwd", 8, 12, 16, "tf32"), ctx)
    assert tf32.matmul_precision is None and tf32.fn().dtype == torch.float32  # TF32 only on a GPU
    with pytest.raises(TrainsimError, match="FP8"):
        build(gemm("qkv", "fwd", 16, 16, 16, "fp8"), ctx)


def test_attention_builder_forward_backward_and_context_parallel_share():
    ctx = OpContext(CPU, LLAMA, Shard(micro_batch=1, seq=32))
    out = build(attention("flash_attn", "fwd", 1, 2, 32, 32, 16, True), ctx).fn()
    assert out.shape == (1, 2, 32, 16)
    grads = build(attention("flash_attn_grad", "bwd", 1, 2, 32, 32, 16, True), ctx).fn()
    assert [g.shape for g in grads] == [(1, 2, 32, 16)] * 3
    cp = build(attention("flash_attn", "fwd", 1, 2, 16, 32, 16, True), ctx)
    assert cp.fn().shape == (1, 2, 16, 16)
    assert build(attention("a", "fwd", 1, 2, 32, 32, 16, True), OpContext(CPU, attention_backend="math")).backend \
        == "math"
    with pytest.raises(TrainsimError, match="unknown backend"):
        build(attention("a", "fwd", 1, 2, 32, 32, 16, True), OpContext(CPU, attention_backend="fast"))


def test_unknown_elementwise_op_is_timed_as_a_copy_of_its_bytes():
    built = build(elementwise("mystery_kernel", "fwd", 4096), OpContext(CPU, GPT, Shard(micro_batch=1, seq=32)))
    assert built.builder == "generic_copy" and built.fn().numel() == 2048


def test_kernels_match_their_definitions():
    x = torch.randn(4, 8)
    bias, res = torch.randn(8), torch.randn(4, 8)
    torch.testing.assert_close(K.bias_dropout_add(x, bias, res, 0.0), res + x + bias)
    torch.testing.assert_close(K.swiglu(x), torch.nn.functional.silu(x[:, :4]) * x[:, 4:])
    cos, sin = K.rope_tables(3, 4, CPU, torch.float32)
    q = torch.randn(1, 3, 2, 4)
    torch.testing.assert_close(K.apply_rope(q, cos, sin)[:, 0], q[:, 0])  # position 0 is not rotated
    probs = torch.ones(6)
    idx = torch.tensor([0, 1, 2, 0, 1, 2])
    y = K.permute(x[:3], idx)
    torch.testing.assert_close(K.unpermute(y, idx, probs, 3), 2 * x[:3])


def test_optimizer_step_counts_the_layer_parameters():
    shard = Shard(micro_batch=1, seq=32)
    built, params = build_optimizer_step(OpContext(CPU, GPT, shard), "fp32", layer_parameter_shapes(GPT, shard))
    h = GPT.hidden_size
    assert params == 12 * h * h + 13 * h  # the layer's weights, biases and two LayerNorms
    assert params == GPT.attention_params + GPT.dense_mlp_params
    built.fn()


def test_vocab_parallel_cross_entropy_is_the_cross_entropy():
    # Megatron's kernel chain computes the same loss and logits gradient as F.cross_entropy
    logits = torch.randn(16, 50, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 50, (16,))
    ours = K.vocab_parallel_cross_entropy(logits, target)
    ref = torch.nn.functional.cross_entropy(logits, target)
    assert ours.item() == pytest.approx(ref.item())
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    assert torch.allclose(g_ours, g_ref)


def test_bias_gradient_builder_reduces_over_the_rows():
    shard = Shard(micro_batch=2, seq=32, fusion=Fusion(bias_in_gemm=False))
    ops = [op for op in layer_work(GPT, shard).bwd if op.name.endswith("_bias_grad")]
    assert sorted(op.name for op in ops) == ["attn_proj_bias_grad", "mlp_fc1_bias_grad", "mlp_fc2_bias_grad",
                                             "qkv_bias_grad"]
    for op in ops:
        built = build(op, OpContext(CPU, GPT, shard))
        assert built.kind == "bias" and built.elements * 2 == op.bytes
        built.fn()
