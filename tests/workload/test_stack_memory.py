"""Memory and elementwise traffic by software stack (framework profile)."""

from __future__ import annotations

import pytest

from trainsim.predictor import predict
from trainsim.spec import Job, Training, load_framework, load_model, load_system
from trainsim.spec.framework import Framework
from trainsim.workload import fusion as fz
from trainsim.workload.layers import layer_work, shard_of
from trainsim.workload.memory import TIGHT_MARGIN, bytes_per_param, is_tight, layer_activation_bytes, memory_per_stage


def job(framework: str | Framework, **kw):  # type: ignore[no-untyped-def]
    tr = {"global_batch_size": 8, "micro_batch_size": 1, "seq_length": 2048, **kw}
    return Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), training=Training(**tr), num_gpus=1,
               framework=framework)


def test_model_states_per_parameter_follow_the_profile():
    # Megatron: bf16 weights, fp32 grads, fp32 master + moments = 18 B; HF: bf16 everything, no master = 8 B
    assert sum(bytes_per_param("bf16", 0, 1, True, framework=load_framework("megatron-core"))) == 18
    assert sum(bytes_per_param("bf16", 0, 1, False, framework=load_framework("hf-transformers"))) == 8
    # 16-bit grads with fp32 master weights: the fp32 gradient copy lives only during the optimizer step
    # (resident 16 B; Megatron's theoretical table counts it: 20)
    assert sum(bytes_per_param("bf16", 0, 1, False, framework=load_framework("megatron-core"))) == 16
    # overriding the moments' dtype changes the optimizer states only
    bf16_states = load_framework("megatron-core").replace(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    assert bytes_per_param("bf16", 0, 1, True, framework=bf16_states)[2] == 4 + 2 + 2


def test_hf_stack_holds_less_state_and_eager_activations_more():
    hf, mc = memory_per_stage(job("hf-transformers"))[0], memory_per_stage(job("megatron-core"))[0]
    assert hf.optimizer_bytes < mc.optimizer_bytes / 2 and hf.gradients_bytes < mc.gradients_bytes
    assert hf.activations_bytes > mc.activations_bytes  # eager RMSNorm / SwiGLU keep more, fp32 logits chain


def test_eager_softmax_saves_six_bytes_per_score_element():
    local = job("megatron-core-local")
    assert local.attention_path == "eager"
    assert fz.softmax_saved_bytes("eager", 2.0) == 6 and fz.softmax_saved_bytes("unfused", 2.0) == 2
    # the loss at its backward peak: Megatron's in-place fp32 softmax + the 16-bit logits; torch's log_softmax output,
    # nll_loss's gradient and log_softmax's input gradient (all fp32)
    assert fz.logits_memory_bytes(fz.Fusion(cross_entropy=False), 2.0) == 6
    assert fz.logits_memory_bytes(fz.Fusion(cross_entropy=False, cross_entropy_impl="torch"), 2.0) == 12
    assert fz.logits_memory_bytes(fz.Fusion(cross_entropy=True), 2.0) == 4


def test_optimizer_step_transients_raise_the_peak_only_above_the_activations():
    j = job("fsdp", global_batch_size=1, seq_length=128)  # foreach AdamW, tiny activations
    s = memory_per_stage(j)[0]
    assert s.optimizer_step_bytes > s.activations_bytes
    assert s.total_bytes == pytest.approx(s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.other_bytes
                                          + s.optimizer_step_bytes)
    fused = memory_per_stage(job("megatron-core", global_batch_size=1, seq_length=128))[0]
    assert fused.optimizer_step_bytes == 0


def test_eager_chains_move_more_bytes_than_fused_kernels():
    fused, eager = layer_work(load_model("llama3-8b"), shard_of(job("megatron-core"))), \
        layer_work(load_model("llama3-8b"), shard_of(job("hf-transformers")))
    by = {op.name: op.bytes for op in fused.fwd}
    for op in eager.fwd:
        if op.name in ("input_norm", "rope", "mlp_swiglu"):
            assert op.bytes > by[op.name] * 1.5, op.name
    assert any(op.name == "layer_grad_accumulation" for op in layer_work(
        load_model("llama3-8b"), shard_of(job("megatron-core-local"))).bwd)


def test_fits_tight_is_flagged_within_ten_percent_of_capacity():
    assert TIGHT_MARGIN == 0.10
    assert is_tight(0.95e9, 1e9) and not is_tight(0.85e9, 1e9) and not is_tight(1.05e9, 1e9)
    p = predict(job("megatron-core"))
    assert p.memory.tight == is_tight(p.memory.peak_bytes, p.memory.capacity_bytes)


def _titan(recompute: str, **framework) -> Job:
    return Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), num_gpus=8,
               framework={"name": "torchtitan", **framework},
               training=Training(global_batch_size=16, micro_batch_size=2, seq_length=8192,
                                 recompute_granularity=recompute))


def test_torchtitan_selective_is_op_level_checkpointing():
    """torchtitan's selective_ac_option='op' (its llama3_8b.toml default) saves every other matmul output and the
    attention output and recomputes the rest: memory and time fall between no checkpointing and full."""
    from trainsim.workload.layers import sac_matmuls
    from trainsim.workload.memory import layer_activation_bytes

    jobs = {r: _titan(r) for r in ("none", "selective", "full")}
    shard = shard_of(jobs["selective"])
    model = jobs["selective"].model
    assert [n for n, _c, _k, saved in sac_matmuls(model, shard) if saved] == ["q", "v", "w1", "w2"]
    work = layer_work(model, shard, False)
    names = {op.name for op in work.recompute}
    assert {"sac_k", "sac_o", "sac_w3"} <= names and not any(op.kind == "attention" for op in work.recompute)
    acts = {r: layer_activation_bytes(model, shard_of(j), False) for r, j in jobs.items()}
    assert acts["full"] < acts["selective"] < acts["none"]
    preds = {r: predict(j) for r, j in jobs.items()}
    times = {r: p.iteration_time_s for r, p in preds.items()}
    assert times["none"] < times["selective"] < times["full"]
    assert preds["selective"].memory.fits and not preds["none"].memory.fits  # the toml's 8B run fits on 80 GB
    # Megatron's selective under the same model recomputes nothing with FlashAttention
    core = _titan("selective", selective_recompute="core_attention")
    assert layer_activation_bytes(model, shard_of(core), False) == acts["none"]


def test_compile_fuses_the_elementwise_chains():
    fusion_of = fz.fusion_of
    eager, compiled = _titan("full"), _titan("full", torch_compile=True)
    assert not fusion_of(eager).norm and not fusion_of(eager).cross_entropy
    f = fusion_of(compiled)
    assert f.norm and f.rope and f.bias_activation and f.cross_entropy
    assert predict(compiled).iteration_time_s < predict(eager).iteration_time_s


@pytest.mark.parametrize(("precision", "fused"), [("bf16", True), ("fp16", False)])
def test_2022_megatron_fuses_gradient_accumulation_only_into_fp32_buffers(precision, fused):
    """Megatron-LM 2022 (``@3.0``) accumulates the wgrad GEMM into main_grad, but its arguments.py switches the
    fusion off without fp32 gradient accumulation (fp16 by default); bf16 forces fp32 accumulation."""
    def make(framework: str) -> Job:
        return Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"), num_gpus=1, framework=framework,
                   training=Training(global_batch_size=4, micro_batch_size=1, precision=precision))

    new, old = make("megatron-lm-2021@3.0"), make("megatron-lm-2021")
    assert fz.fusion_of(new).grad_accumulation is fused
    assert not fz.fusion_of(old).grad_accumulation  # the 2021 code had no fused wgrad accumulation
    adds = [op for op in layer_work(new.model, shard_of(new), False).bwd if op.name == "layer_grad_accumulation"]
    assert bool(adds) is not fused
    assert (predict(new).iteration_time_s < predict(old).iteration_time_s) or not fused


def test_fp8_param_gather_keeps_only_fp8_weights_and_gathers_one_byte_per_parameter():
    """Megatron-Core --fp8-param-gather: no 16-bit compute copy of the weights, FP8 parameter all-gathers."""
    from trainsim.workload.fp8 import recipe_cost
    from trainsim.workload.sharding import sharding_of

    def make(fp8_params: bool) -> Job:
        return Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), num_gpus=8,
                   training=Training(global_batch_size=8, precision="fp8", zero_stage=1,
                                     fp8_param_gather=fp8_params))

    plain, fp8p = make(False), make(True)
    assert sharding_of(plain).param_bytes == 2.0 and sharding_of(fp8p).param_bytes == 1.0
    w_plain = memory_per_stage(plain)[0].weights_bytes
    w_fp8 = memory_per_stage(fp8p)[0].weights_bytes
    copy = recipe_cost(None).weight_copy_bytes
    assert w_fp8 / w_plain == pytest.approx(copy / (2.0 + copy))
    assert predict(fp8p).breakdown_s["dp_comm"] <= predict(plain).breakdown_s["dp_comm"]


def test_fp8_param_gather_needs_fp8_and_the_distributed_optimizer():
    from trainsim.errors import TrainsimError

    for tr in (Training(global_batch_size=8, precision="bf16", zero_stage=1, fp8_param_gather=True),
               Training(global_batch_size=8, precision="fp8", zero_stage=0, fp8_param_gather=True)):
        with pytest.raises(TrainsimError, match="fp8_param_gather"):
            Job(model=load_model("llama3-8b"), system=load_system("dgx-h100"), num_gpus=8, training=tr)


def test_cross_entropy_kernels_follow_the_stack():
    # bf16 logits: Megatron's vocab-parallel chain 38 + 14 B per logit, transformers' F.cross_entropy 22 + 26 B,
    # fused 2 + 4 B (docstring of trainsim.workload.fusion; the gpu-h100 traces measure 40.6 + 14.5 and 22.5 + 23)
    assert fz.cross_entropy_bytes(fz.Fusion(cross_entropy_impl="vocab_parallel"), 2.0) == (38, 14)
    assert fz.cross_entropy_bytes(fz.Fusion(cross_entropy_impl="torch"), 2.0) == (22, 26)
    assert fz.cross_entropy_bytes(fz.Fusion(cross_entropy=True, cross_entropy_impl="torch"), 2.0) == (2, 4)
    # F.cross_entropy on the 16-bit logits (NeMo AutoModel's MaskedCrossEntropy(fp32_upcast=False)): log_softmax
    # 4e forward, zero fill and log_softmax backward 5e; its three peak tensors in 16 bits
    assert fz.cross_entropy_bytes(fz.Fusion(cross_entropy_impl="torch_16bit"), 2.0) == (8, 10)
    assert fz.logits_memory_bytes(fz.Fusion(cross_entropy=False, cross_entropy_impl="torch_16bit"), 2.0) == 6
    assert fz.fusion_of(job("hf-transformers")).cross_entropy_impl == "torch"
    assert fz.fusion_of(job("megatron-core-local")).cross_entropy_impl == "vocab_parallel"


def test_bias_gradients_are_reductions_outside_transformer_engine():
    gpt = load_model("gpt3-1.7b")

    def bias_grads(framework: str) -> list[float]:
        j = Job(model=gpt, system=load_system("dgx-h100"), num_gpus=1, framework=framework,
                training=Training(global_batch_size=4, micro_batch_size=2, seq_length=2048))
        return [op.bytes for op in layer_work(gpt, shard_of(j)).bwd if op.name.endswith("_bias_grad")]

    h, t = gpt.hidden_size, 2 * 2048
    # local spec / Megatron-LM 2021: QKV, projection, fc1 and fc2 bias gradients each read the output gradient once
    assert sum(bias_grads("megatron-core-local")) == 2 * t * (3 * h + h + gpt.ffn_size + h)
    assert sum(bias_grads("megatron-lm-2021")) > 0
    assert bias_grads("megatron-core") == []  # Transformer Engine: cuBLASLt bias-gradient epilogue
    assert bias_grads("torchtitan") != [] and load_model("llama3-8b").add_bias_linear is False


def test_megatron_fused_qkv_split_concatenates_gradients_and_local_linears_add_their_bias():
    gpt = load_model("gpt3-1.7b")

    def ops(framework: str) -> dict[str, float]:
        j = Job(model=gpt, system=load_system("dgx-h100"), num_gpus=1, framework=framework,
                training=Training(global_batch_size=4, micro_batch_size=2, seq_length=2048))
        w = layer_work(gpt, shard_of(j))
        return {op.name: op.bytes for op in (*w.fwd, *w.bwd) if op.name in ("qkv_split_grad", "qkv_bias")}

    n = 2 * 2048 * 3 * gpt.hidden_size  # QKV output elements of one micro-batch
    assert ops("megatron-core-local") == {"qkv_split_grad": 2 * 2 * n, "qkv_bias": 2 * 2 * n}
    assert ops("megatron-core") == {"qkv_split_grad": 2 * 2 * n}  # TE adds the bias in its GEMM
    assert ops("torchtitan") == {} and ops("hf-transformers") == {}  # separate q/k/v projections


def test_llm_foundry_fuses_the_loss_and_updates_its_train_metrics_every_micro_batch():
    from trainsim.workload.layers import head_work

    lf, fsdp = job("llm-foundry"), job("fsdp")
    assert fz.fusion_of(lf).cross_entropy and not fz.fusion_of(fsdp).cross_entropy
    # the loss at its peak: 16-bit logits only (flash-attn's fused loss), not the fp32 chain of transformers' loss
    assert fz.logits_memory_bytes(fz.fusion_of(lf), 2.0) == 4 and fz.logits_memory_bytes(fz.fusion_of(fsdp), 2.0) == 12
    # Composer's LanguageCrossEntropy and LanguagePerplexity: two forward-only torch losses on the logits (2 + 20 B)
    ops = {op.name: op for op in head_work(lf.model, shard_of(lf)).fwd}
    logits = 2048 * lf.model.padded_vocab_size(1)  # one sequence per micro-batch
    assert ops["train_metrics"].bytes == pytest.approx(2 * 22 * logits)
    assert "train_metrics" not in {op.name for op in head_work(fsdp.model, shard_of(fsdp)).fwd}


def test_eager_rmsnorm_keeps_its_fp32_input_and_the_normalised_tensor_instead_of_its_input():
    assert fz.eager_norm_saved_bytes(fz.Fusion(norm=False), rms=True) == 4
    assert fz.eager_norm_saved_bytes(fz.Fusion(norm=True), rms=True) == 0
    assert fz.eager_norm_saved_bytes(fz.Fusion(norm=False), rms=False) == 0  # LayerNorm: one native kernel
    hf = job("hf-transformers")
    fused = job(load_framework("hf-transformers").replace(fused_norm=True))
    m, sh = hf.model, shard_of(hf)
    delta = layer_activation_bytes(m, sh) - layer_activation_bytes(fused.model, shard_of(fused))
    assert delta == pytest.approx(2 * 4 * sh.micro_batch * sh.seq * m.hidden_size)


def test_sdpa_layout_keeps_the_attention_output_twice():
    """torch SDPA (bhsd): the kernel saves its output and o_proj keeps the contiguous transposed copy."""
    hf = job("hf-transformers")
    bshd = job(load_framework("hf-transformers").replace(attention_layout="bshd"))
    assert fz.fusion_of(hf).attention_output_copy and not fz.fusion_of(bshd).attention_output_copy
    m, sh = hf.model, shard_of(hf)
    delta = layer_activation_bytes(m, sh) - layer_activation_bytes(bshd.model, shard_of(bshd))
    assert delta == pytest.approx(2 * sh.micro_batch * sh.seq * m.num_attention_heads * m.head_dim)
    assert not fz.fusion_of(job("megatron-core")).attention_output_copy


def _deepspeed_job(precision: str, zero: int, pp: int = 1, framework: str = "megatron-deepspeed") -> Job:
    return Job(model=load_model("gpt3-1.7b"), system=load_system("dgx-a100"), num_gpus=8 * pp, framework=framework,
               parallelism={"pp": pp},
               training=Training(global_batch_size=64, micro_batch_size=1, precision=precision, zero_stage=zero))


def test_bf16_optimizer_adds_every_backward_into_a_whole_fp32_gradient_buffer():
    """DeepSpeed's BF16_Optimizer (bf16 at stage 0) frees the bf16 gradients before each backward, then casts them to
    fp32 and adds them into a whole fp32 buffer: 18 bytes per parameter per micro-batch, and 2 + 4 bytes of gradients
    per parameter resident (no fp32 copy at the step: the buffer is it)."""
    bf16, fp16 = _deepspeed_job("bf16", 0), _deepspeed_job("fp16", 0)
    assert bf16.bf16_optimizer and not fp16.bf16_optimizer and not _deepspeed_job("bf16", 1).bf16_optimizer
    f = fz.fusion_of(bf16)
    assert f.grad_copy_fp32 and fz.grad_accumulation_bytes(f, 2.0) == 2 + 4 + 12
    assert fz.grad_accumulation_bytes(fz.fusion_of(fp16), 2.0) == 2 + 2 * 2  # autograd's add into the fp16 .grad
    adds = [op for op in layer_work(bf16.model, shard_of(bf16), False).bwd if op.name == "layer_grad_accumulation"]
    assert adds and adds[0].bytes == pytest.approx(18 * (bf16.model.attention_params + bf16.model.dense_mlp_params))
    s = memory_per_stage(bf16)[0]
    assert s.gradients_bytes == pytest.approx(3 * s.weights_bytes)  # bf16 weights: 2 bytes
    assert memory_per_stage(fp16)[0].gradients_bytes == pytest.approx(memory_per_stage(fp16)[0].weights_bytes)
    assert s.optimizer_step_bytes < memory_per_stage(_deepspeed_job("bf16", 1))[0].optimizer_step_bytes


@pytest.mark.parametrize("framework", ["megatron-deepspeed", "deepspeed"])
def test_deepspeed_pipeline_runs_bf16_zero1_as_the_bf16_optimizer(framework, recwarn):
    """DeepSpeed's pipeline engine has no ZeRO-1 with bf16 gradient accumulation: bf16 pipeline runs use stage 0 or
    ZeRO-1 with fp32 accumulation, both the BF16_Optimizer; without pipelining ZeRO-1 stays ZeRO-1, and fp16 too."""
    j = _deepspeed_job("bf16", 1, pp=2, framework=framework)
    assert j.training.zero_stage == 0 and j.bf16_optimizer
    assert any("BF16_Optimizer" in str(w.message) for w in recwarn)
    assert _deepspeed_job("bf16", 1, pp=1, framework=framework).training.zero_stage == 1
    assert _deepspeed_job("fp16", 1, pp=2, framework=framework).training.zero_stage == 1
    assert _deepspeed_job("bf16", 1, pp=2, framework="megatron-core").training.zero_stage == 1
