"""Measure real single-GPU training steps, one configuration per fresh Python process.

The successor of ``shared/data/gpu-h100/measure_training.py`` (same models, same optimizers, same timing protocol:
3 warm-up steps, the median of 6 timed steps), fixing its caveat: every configuration runs in its own process, so
``torch.cuda.max_memory_allocated`` is that configuration's own peak. Models are built directly on the GPU in their
training dtype. Beyond the original it records the optimizer step alone (median of 3 after the timed steps) and
adds shapes that exercise other paths of the model: transformers' eager attention (fp32 softmax on the s² scores),
torch.compile, long sequences with checkpointing, a small model with a 152k vocabulary, grouped-query attention on
the Megatron side.

Usage (on the GPU machine; megatron-core must be importable for the ``mcore-*`` configurations)::

    python benchmarks/h100/measure_training.py --list hf        # names of one group
    python benchmarks/h100/measure_training.py NAME --out DIR    # one configuration, appends to DIR/measured.jsonl

A configuration that fails (out of memory included) is written as a line with ``error``: a measured OOM is a fact.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
import traceback
from typing import Any

#: Qwen3-30B-A3B-like layers on one GPU (Megatron-Core, SwiGLU, GQA) and its 16-expert top-8 per-GPU expert work
A3B: dict[str, Any] = dict(framework="megatron-core", L=8, h=2048, heads=32, kv=4, ffn=6144, V=32768, seq=2048,
                           mbs=2, nmb=4, swiglu=True)
E16: dict[str, Any] = dict(E=16, topk=8, moe_ffn=768)

# name -> (framework, shape and step); L layers, h hidden, heads, kv groups, ffn, V vocabulary, seq, mbs, nmb
CONFIGS: dict[str, dict[str, Any]] = {
    # transformers LlamaForCausalLM, SDPA unless stated, bf16 parameters and bf16 AdamW states (fused)
    "hf-llama-1b": dict(framework="hf-transformers", L=16, h=2048, heads=32, kv=8, ffn=8192, V=128256, seq=4096,
                        mbs=2, nmb=4),
    "hf-llama-3b": dict(framework="hf-transformers", L=28, h=3072, heads=24, kv=8, ffn=8192, V=128256, seq=4096,
                        mbs=1, nmb=8),
    "hf-llama-8b-ckpt": dict(framework="hf-transformers", L=32, h=4096, heads=32, kv=8, ffn=14336, V=128256,
                             seq=4096, mbs=1, nmb=4, recompute=True),
    "hf-llama-1b-eager": dict(framework="hf-transformers", L=16, h=2048, heads=32, kv=8, ffn=8192, V=128256,
                              seq=2048, mbs=2, nmb=4, attn="eager"),
    "hf-llama-1b-ckpt-seq8k": dict(framework="hf-transformers", L=16, h=2048, heads=32, kv=8, ffn=8192, V=128256,
                                   seq=8192, mbs=2, nmb=2, recompute=True),
    "hf-llama-3b-ckpt": dict(framework="hf-transformers", L=28, h=3072, heads=24, kv=8, ffn=8192, V=128256,
                             seq=4096, mbs=4, nmb=2, recompute=True),
    "hf-qwen-0.5b": dict(framework="hf-transformers", L=24, h=896, heads=14, kv=2, ffn=4864, V=151936, seq=4096,
                         mbs=4, nmb=2),
    "hf-llama-1b-compile": dict(framework="hf-transformers", L=16, h=2048, heads=32, kv=8, ffn=8192, V=128256,
                                seq=4096, mbs=2, nmb=4, compile=True),
    # Megatron-Core GPTModel, local layer spec (no Transformer Engine, no Apex)
    "mcore-gpt-350m": dict(framework="megatron-core", L=24, h=1024, heads=16, kv=16, ffn=4096, V=51200, seq=2048,
                           mbs=2, nmb=16),
    "mcore-gpt-1.3b": dict(framework="megatron-core", L=24, h=2048, heads=16, kv=16, ffn=8192, V=51200, seq=2048,
                           mbs=4, nmb=8),
    "mcore-gpt-1.3b-mbs1": dict(framework="megatron-core", L=24, h=2048, heads=16, kv=16, ffn=8192, V=51200,
                                seq=2048, mbs=1, nmb=32),
    "mcore-gpt-1.3b-full-recompute": dict(framework="megatron-core", L=24, h=2048, heads=16, kv=16, ffn=8192,
                                          V=51200, seq=2048, mbs=8, nmb=4, recompute=True),
    "mcore-gpt-2.7b": dict(framework="megatron-core", L=32, h=2560, heads=32, kv=32, ffn=10240, V=51200, seq=2048,
                           mbs=1, nmb=16),
    "mcore-gpt-2.7b-full-recompute": dict(framework="megatron-core", L=32, h=2560, heads=32, kv=32, ffn=10240,
                                          V=51200, seq=2048, mbs=4, nmb=4, recompute=True),
    "mcore-llama-1b-gqa": dict(framework="megatron-core", L=16, h=2048, heads=32, kv=8, ffn=8192, V=128256,
                               seq=2048, mbs=2, nmb=8, swiglu=True),
    # Megatron-Core mixture of experts, local spec (SequentialMLP: one expert after another, no Transformer Engine),
    # alltoall token dispatcher, dropless, aux-loss router in fp32. The per-GPU expert work of Qwen3-30B-A3B (hidden
    # 2048, expert FFN 768, top-8) at expert parallelism 8 is 16 local experts receiving tokens*8/16 rows each:
    # E=16, topk=8 on one GPU has the same GEMM shapes (no all-to-all). A dense twin with ffn = topk * expert FFN
    # has the same active FLOPs.
    **{f"mcore-a3b-{k}": A3B | v for k, v in (
        ("dense", {}), ("16e", E16), ("16e-mbs1", E16 | dict(mbs=1, nmb=8)), ("16e-mbs4", E16 | dict(mbs=4, nmb=2)),
        ("4e", dict(E=4, topk=4, moe_ffn=1536)), ("64e", dict(E=64, topk=8, moe_ffn=768)),
        ("128e", dict(L=4, E=128, topk=8, moe_ffn=768)))},
    # The same layers on 128-token micro-batches: every kernel is short, so the step time is the host's (Python,
    # autograd, dispatch, synchronisation) time per layer, dense and mixture-of-experts with 4, 16 and 64 experts.
    **{f"mcore-host-{k}": A3B | dict(seq=128, mbs=1, nmb=8) | v for k, v in (
        ("dense", {}), ("4e", dict(E=4, topk=4, moe_ffn=1536)), ("16e", E16), ("64e", dict(E=64, topk=8, moe_ffn=768)),
        ("dense-L16", dict(L=16)))},
    **{f"hf-host-L{n}": A3B | dict(framework="hf-transformers", L=n, seq=128, mbs=1, nmb=8)
       for n in (8, 16)},
    # Held out: predicted by trainsim before they were measured (2026-11-24, commit 2904bae)
    "mcore-heldout-32e": A3B | dict(L=6, E=32, topk=4, moe_ffn=1024),
    "hf-mixtral-8e": A3B | dict(framework="hf-transformers", kv=8, E=8, topk=2, moe_ffn=2048),
}
GROUPS = {"hf": [n for n, c in CONFIGS.items() if c["framework"] == "hf-transformers" and "-host-" not in n
                 and "E" not in c],
          "megatron": [n for n in CONFIGS if n.startswith("mcore-gpt") or n == "mcore-llama-1b-gqa"],
          "moe": [n for n, c in CONFIGS.items() if n.startswith("mcore-a3b")],
          "host": [n for n in CONFIGS if "-host-" in n],
          "heldout": [n for n in CONFIGS if "heldout" in n or "mixtral" in n]}


def timed(step, torch, warm: int = 3, reps: int = 6) -> tuple[float, float, float]:
    """Median, min and max wall time of ``reps`` steps after ``warm`` warm-up steps (device synchronised)."""
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def optimizer_time(opt_step, torch, reps: int = 3) -> float:
    """Median wall time of the optimizer step alone (device synchronised before and after)."""
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt_step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


TRACE_DIR: str | None = None  # --trace: write a Kineto trace of one more step and its kernel summary


def traced(step, torch, name: str) -> dict[str, Any]:
    """One more step under the PyTorch profiler: GPU kernel time and count, host synchronisations, wall time.

    ``gpu_busy_s`` is the sum of kernel durations (one stream carries the step), ``trace_wall_s`` the profiled step's
    wall time, ``syncs`` the host waits on the device (``cudaStreamSynchronize``/``cudaEventSynchronize``/
    ``cudaDeviceSynchronize``). The operators' host times (``key_averages``) are written to ``TRACE_DIR``.
    """
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    assert TRACE_DIR is not None
    with open(os.path.join(TRACE_DIR, f"{name}.ops.txt"), "w") as f:
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=45, max_name_column_width=60))
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    sync_names = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")
    syncs = sum(1 for e in prof.events() if e.name in sync_names)
    busy = sum(e.device_time_total for e in kernels) / 1e6  # profiler times are microseconds
    return dict(trace_wall_s=wall, gpu_busy_s=busy, kernels_per_step=len(kernels), syncs_per_step=syncs)


def measured(step, opt, model, torch, setup: str, name: str = "") -> dict[str, Any]:
    """Time ``step`` (peak memory from here on), then the optimizer step alone; the fields of one result line."""
    torch.cuda.reset_peak_memory_stats()
    med, lo, hi = timed(step, torch)
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    line = dict(params=sum(p.numel() for p in model.parameters()), iter_s=med, iter_min_s=lo, iter_max_s=hi,
                optimizer_s=optimizer_time(opt.step, torch), peak_alloc_bytes=peak, peak_reserved_bytes=reserved,
                setup=setup)
    if TRACE_DIR is not None:
        line |= traced(step, torch, name)
    return line


def run_hf(c: dict[str, Any], torch) -> dict[str, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    common = dict(num_hidden_layers=c["L"], hidden_size=c["h"], num_attention_heads=c["heads"],
                  num_key_value_heads=c["kv"], vocab_size=c["V"], max_position_embeddings=c["seq"],
                  tie_word_embeddings=False, attn_implementation=c.get("attn", "sdpa"))
    if c.get("E"):  # Mixtral: every layer a sparse MoE block, no router aux loss in the step
        cfg: Any = MixtralConfig(intermediate_size=c["moe_ffn"], num_local_experts=c["E"],
                                 num_experts_per_tok=c["topk"], **common)
    else:
        cfg = LlamaConfig(intermediate_size=c["ffn"], **common)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = (MixtralForCausalLM if c.get("E") else LlamaForCausalLM)(cfg)
    for key in ("_experts_implementation", "experts_implementation"):  # transformers 5: how the experts run
        if getattr(cfg, key, None) is not None:
            print(f"{key}: {getattr(cfg, key)}", flush=True)
    torch.set_default_dtype(torch.float32)
    if c.get("recompute"):
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if c.get("compile") else model
    ids = torch.randint(0, c["V"], (c["mbs"], c["seq"]), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        for _ in range(c["nmb"]):
            fwd(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    return measured(step, opt, model, torch, name=c["name"],
                    setup=f"{type(model).__name__} built on the GPU in bf16, attn_implementation="
                      f"{c.get('attn', 'sdpa')!r}{', torch.compile(model)' if c.get('compile') else ''}"
                      f"{', gradient_checkpointing_enable()' if c.get('recompute') else ''}, "
                      "torch.optim.AdamW(fused=True) with bf16 states, gradient accumulation over micro-batches")


def run_megatron(c: dict[str, Any], torch) -> dict[str, Any]:
    import torch.nn.functional as F
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel as DDP
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    model_parallel_cuda_manual_seed(1234)
    swiglu = bool(c.get("swiglu"))
    kw: dict[str, Any] = dict(
        num_layers=c["L"], hidden_size=c["h"], num_attention_heads=c["heads"], num_query_groups=c["kv"],
        ffn_hidden_size=c["ffn"], gated_linear_unit=swiglu, activation_func=F.silu if swiglu else F.gelu,
        normalization="RMSNorm" if swiglu else "LayerNorm", add_bias_linear=not swiglu, bf16=True,
        params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, hidden_dropout=0.0, attention_dropout=0.0,
        gradient_accumulation_fusion=False, bias_activation_fusion=not swiglu, masked_softmax_fusion=False,
        persist_layer_norm=False, apply_rope_fusion=False)
    if c.get("recompute"):
        kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    if c.get("E"):
        kw.update(num_moe_experts=c["E"], moe_router_topk=c["topk"], moe_ffn_hidden_size=c["moe_ffn"],
                  moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss",
                  moe_aux_loss_coeff=1e-3, moe_router_dtype="fp32", moe_grouped_gemm=False)
    cfg = TransformerConfig(**kw)
    spec = get_gpt_layer_local_spec(num_experts=c.get("E"), moe_grouped_gemm=False,
                                    normalization=kw["normalization"])
    model = GPTModel(config=cfg, transformer_layer_spec=spec,
                     vocab_size=c["V"], max_sequence_length=c["seq"],
                     position_embedding_type="rope" if swiglu else "learned_absolute",
                     share_embeddings_and_output_weights=not swiglu)
    model = Float16Module(cfg, model).cuda()
    model = DDP(config=cfg, ddp_config=DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=False), module=model)
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True,
                                                 use_distributed_optimizer=False, clip_grad=1.0), [model])
    mbs, seq = c["mbs"], c["seq"]
    tokens = torch.randint(0, c["V"], (mbs, seq), device="cuda")
    pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(mbs, seq)
    labels = torch.randint(0, c["V"], (mbs, seq), device="cuda")
    mask = torch.ones(mbs, seq, device="cuda", dtype=torch.float)

    def forward_step(data_iterator, model):
        out = model(tokens, pos, None, labels=labels)

        def loss_func(output_tensor):
            loss = (output_tensor.float() * mask).sum() / mask.sum()
            return loss, {"loss": loss.detach()}
        return out, loss_func

    fb = get_forward_backward_func()

    def step() -> None:
        model.zero_grad_buffer()
        opt.zero_grad()
        fb(forward_step_func=forward_step, data_iterator=iter([None] * c["nmb"]), model=[model],
           num_microbatches=c["nmb"], seq_length=seq, micro_batch_size=mbs, forward_only=False)
        opt.step()

    moe = (f", MoE {c['E']} experts top-{c['topk']} (SequentialMLP, alltoall dispatcher, dropless, aux loss, "
           "fp32 router)") if c.get("E") else ""
    return measured(step, opt, model, torch, name=c["name"],
                    setup=f"GPTModel, get_gpt_layer_local_spec{moe}, Float16Module (bf16), DDP with fp32 grad buffer, "
                      "get_megatron_optimizer (Adam, bf16, fp32 main params), get_forward_backward_func (no "
                      "pipelining), unfused DotProductAttention"
                      f"{', full recomputation (uniform, 1 layer)' if c.get('recompute') else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", nargs="?")
    ap.add_argument("--list", choices=sorted(GROUPS))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--trace", action="store_true", help="also profile one step (Kineto trace into --out)")
    a = ap.parse_args()
    global TRACE_DIR
    TRACE_DIR = a.out if a.trace else None
    if a.list:
        print(" ".join(GROUPS[a.list]))
        return
    c = CONFIGS[a.name] | {"name": a.name}
    import torch
    line: dict[str, Any] = dict(framework=c["framework"], name=a.name, L=c["L"], h=c["h"], heads=c["heads"],
                                kv=c["kv"], ffn=c["ffn"], V=c["V"], seq=c["seq"], mbs=c["mbs"],
                                num_microbatches=c["nmb"], swiglu=c["framework"] == "hf-transformers"
                                or bool(c.get("swiglu")), recompute=bool(c.get("recompute")),
                                attn_implementation=c.get("attn", "sdpa" if c["framework"] == "hf-transformers"
                                                          else "unfused"), compile=bool(c.get("compile")))
    if c.get("E"):
        line |= dict(num_experts=c["E"], topk=c["topk"], moe_ffn=c["moe_ffn"])
    try:
        line |= (run_hf if c["framework"] == "hf-transformers" else run_megatron)(c, torch)
    except Exception as e:  # a failed configuration is recorded, not lost
        traceback.print_exc()
        line |= dict(error=repr(e)[:400], peak_alloc_bytes=torch.cuda.max_memory_allocated())
    versions = [f"PyTorch {torch.__version__}"]
    for mod in ("transformers", "megatron.core"):
        with contextlib.suppress(Exception):
            versions.append(f"{mod} {__import__(mod, fromlist=['__version__']).__version__}")
    p = torch.cuda.get_device_properties(0)
    line |= dict(gpu=f"{p.name} ({p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB)",
                 software=", ".join(versions), python=platform.python_version(),
                 measured=time.strftime("%Y-%m-%d", time.gmtime()), process="fresh (one configuration)")
    print(json.dumps(line), flush=True)
    with open(os.path.join(a.out, "measured.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
