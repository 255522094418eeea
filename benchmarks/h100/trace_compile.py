"""Kineto trace of one micro-batch of hf-llama-1b (mbs 2, seq 4096), eager or torch.compile'd; GPU time by kernel.

    python benchmarks/h100/trace_compile.py eager|compile --out DIR
Writes DIR/kernels-<mode>.csv (kernel name, calls, total µs) and DIR/hf-llama-1b-<mode>.trace.json.gz.
"""
import csv
import gzip
import os
import shutil
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

mode, out = sys.argv[1], sys.argv[sys.argv.index("--out") + 1]
cfg = LlamaConfig(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                  intermediate_size=8192, vocab_size=128256, max_position_embeddings=4096, tie_word_embeddings=False,
                  attn_implementation="sdpa")
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg)
torch.set_default_dtype(torch.float32)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
fwd = torch.compile(model) if mode == "compile" else model
ids = torch.randint(0, cfg.vocab_size, (2, 4096), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    fwd(input_ids=ids, labels=ids).loss.backward()
    opt.step()


for _ in range(3):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
step()
torch.cuda.synchronize()
print(mode, "step s", time.perf_counter() - t0, flush=True)
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts) as prof:
    step()
    torch.cuda.synchronize()
tot = {}
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        c, t = tot.get(e.name, (0, 0.0))
        tot[e.name] = (c + 1, t + e.device_time)
with open(os.path.join(out, f"kernels-{mode}.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["kernel", "calls", "total_us"])
    for k, (c, t) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
        w.writerow([k[:300], c, round(t, 1)])
path = f"/tmp/hf-llama-1b-{mode}.trace.json"
prof.export_chrome_trace(path)
with open(path, "rb") as a, gzip.open(os.path.join(out, f"hf-llama-1b-{mode}.trace.json.gz"), "wb") as b:
    shutil.copyfileobj(a, b)
print(mode, "GPU kernel total ms", sum(t for _, t in tot.values()) / 1e3)
