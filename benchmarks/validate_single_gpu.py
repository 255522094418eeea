"""End-to-end check of measured operator tables: predict a real training step from `trainsim profile` tables.

Trains a small GPT (GPT-3 layout: LayerNorm, learned positions, GeLU MLP, biases, tied embeddings, causal
FlashAttention through PyTorch SDPA) with a plain PyTorch loop on one device — forward, backward, gradient clipping,
AdamW — and measures the step time. Then it describes the same job to trainsim, profiles its operators with
`trainsim profile` on the same device, and compares the measured step with

- `trainsim predict --op-costs TABLE` (measured operator times; the optimizer step from the table), and
- `trainsim predict` (the analytic model).

The model is built from `trainsim.profile.kernels`, the functions the profiler times, so the check is of the
composition (the sum of per-operator times, the unmodelled glue kernels — reshapes, copies, gradient accumulation —
and launch gaps), not of a hand-matched kernel list. The loop has no data loader or logging, so both predictions use
`iteration_overhead_s: 0` (a calibration file written next to the results).

GPU (the intended use; H100/H200/A100/B200 map to the dgx-h100, hgx-h200, dgx-a100 and dgx-b200 presets):

    python benchmarks/validate_single_gpu.py --device cuda --layers 12 --hidden 2048 --heads 16 --seq 2048 --mbs 4

CPU (checks the mechanism; the "system" is this CPU, described by one large GEMM and one large copy):

    python benchmarks/validate_single_gpu.py --device cpu --layers 4 --hidden 512 --heads 8 --seq 256 --mbs 4 \
        --vocab 8192 --precision fp32

Writes results.json (and the tables, model, system and calibration files) to --out, and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trainsim.cost.tables import gpu_key
from trainsim.profile import kernels as K

PRESETS = {"h100": "dgx-h100", "h200": "hgx-h200", "a100": "dgx-a100", "b200": "dgx-b200"}


# ---- the model ----------------------------------------------------------------------------------------------------
class Block(torch.nn.Module):
    """One GPT layer, written with the profiler's kernels (Megatron structure: biases in the fused epilogues)."""

    def __init__(self, h: int, heads: int, ffn: int, p: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()

        def w(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, device=device, dtype=dtype) * 0.02)

        def const(value: float, n: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.full((n,), value, device=device, dtype=dtype))

        self.heads, self.p = heads, p
        self.ln1_w, self.ln1_b = const(1.0, h), const(0.0, h)
        self.qkv_w, self.qkv_b = w(3 * h, h), const(0.0, 3 * h)
        self.proj_w, self.proj_b = w(h, h), const(0.0, h)
        self.ln2_w, self.ln2_b = const(1.0, h), const(0.0, h)
        self.fc1_w, self.fc1_b = w(ffn, h), const(0.0, ffn)
        self.fc2_w, self.fc2_b = w(h, ffn), const(0.0, h)

    def forward(self, x: torch.Tensor, b: int, s: int) -> torch.Tensor:
        h = x.shape[-1]
        d = h // self.heads
        y = K.norm(x, self.ln1_w, self.ln1_b, "LayerNorm")
        qkv = F.linear(y, self.qkv_w, self.qkv_b).view(b, s, 3, self.heads, d)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        a = K.attention(q, k, v, True, self.p if self.training else 0.0)
        a = a.transpose(1, 2).reshape(b * s, h)
        x = K.bias_dropout_add(F.linear(a, self.proj_w), self.proj_b, x, self.p, self.training)
        y = K.norm(x, self.ln2_w, self.ln2_b, "LayerNorm")
        y = K.bias_gelu(F.linear(y, self.fc1_w), self.fc1_b)
        return K.bias_dropout_add(F.linear(y, self.fc2_w), self.fc2_b, x, self.p, self.training)


class GPT(torch.nn.Module):
    def __init__(self, layers: int, h: int, heads: int, vocab: int, seq: int, p: float, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        self.p = p
        self.wte = torch.nn.Parameter(torch.randn(vocab, h, device=device, dtype=dtype) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(seq, h, device=device, dtype=dtype) * 0.01)
        self.blocks = torch.nn.ModuleList(Block(h, heads, 4 * h, p, dtype, device) for _ in range(layers))
        self.lnf_w = torch.nn.Parameter(torch.ones(h, device=device, dtype=dtype))
        self.lnf_b = torch.nn.Parameter(torch.zeros(h, device=device, dtype=dtype))

    def forward(self, ids: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        x = F.dropout(K.embed(ids, self.wte, self.wpe), self.p, self.training).view(b * s, -1)
        for blk in self.blocks:
            x = blk(x, b, s)
        x = K.norm(x, self.lnf_w, self.lnf_b, "LayerNorm")
        return K.cross_entropy(F.linear(x, self.wte), target.view(-1))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_training(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    torch.manual_seed(0)
    model = GPT(args.layers, args.hidden, args.heads, args.vocab, args.seq, args.dropout, dtype, device).train()
    params = [p for p in model.parameters()]
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    ids = torch.randint(0, args.vocab, (args.mbs, args.seq), device=device)
    target = torch.randint(0, args.vocab, (args.mbs, args.seq), device=device)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = model(ids, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return float(loss.detach()) if args.check_loss else 0.0

    for _ in range(args.warmup_steps):
        step()
    sync(device)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    n_params = sum(p.numel() for p in params)
    return {"step_s": statistics.median(times), "step_min_s": min(times), "step_max_s": max(times),
            "steps": len(times), "params": n_params}


# ---- describing the job to trainsim ---------------------------------------------------------------------------------
def model_json(args: argparse.Namespace) -> dict[str, Any]:
    return {"name": "validate-gpt", "num_layers": args.layers, "hidden_size": args.hidden,
            "num_attention_heads": args.heads, "ffn_hidden_size": 4 * args.hidden, "vocab_size": args.vocab,
            "make_vocab_size_divisible_by": 1, "seq_length": args.seq, "normalization": "LayerNorm",
            "position_embedding_type": "learned_absolute", "add_bias_linear": True,
            "hidden_dropout": args.dropout, "attention_dropout": args.dropout}


def cpu_system(out: Path, dtype: torch.dtype) -> Path:
    """A 'system' for this CPU: peak from one large GEMM, bandwidth from one large copy (at trainsim's default
    efficiencies, so that the analytic roofline reproduces both)."""
    n = 1024
    a = torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        a @ a
    t0 = time.perf_counter()
    for _ in range(5):
        a @ a
    gemm_flops = 5 * 2 * n**3 / (time.perf_counter() - t0)
    src = torch.empty(64 << 20, dtype=torch.uint8).random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    bandwidth = 5 * 2 * src.numel() / (time.perf_counter() - t0)
    peak_t = gemm_flops / 0.80 / 1e12
    import yaml

    data = {"name": "this-cpu", "source": "measured by benchmarks/validate_single_gpu.py",
            "gpu": {"name": "cpu", "generation": "default",
                    "peak_tflops": {"fp32": peak_t, "tf32": peak_t, "fp16": peak_t, "bf16": peak_t},
                    "vector_tflops": peak_t, "hbm_bandwidth_tb_s": bandwidth / 0.80 / 1e12,
                    "hbm_capacity_gb": 64, "num_sms": torch.get_num_threads()},
            "node": {"gpus_per_node": 1, "nvlink_bandwidth_gb_s": 10},
            "network": {"nics_per_node": 1, "nic_bandwidth_gbit_s": 10}}
    path = out / "system-cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trainsim(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "trainsim", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"trainsim {' '.join(args[:1])} failed:\n{proc.stderr}")
    return proc.stdout


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None,
                    help="bf16 on GPU, fp32 on CPU by default")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10, help="trainsim profile --reps")
    ap.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (training and profile)")
    ap.add_argument("--profile-arg", action="append", default=[], help="extra flag for trainsim profile "
                    "(repeatable), e.g. --profile-arg=--min-warmup-ms=0")
    ap.add_argument("--system", default=None, help="system preset/YAML (default: from the device)")
    ap.add_argument("--op-costs", default=None, help="use this operator table instead of profiling")
    ap.add_argument("--out", default="validate-out")
    ap.add_argument("--check-loss", action="store_true", help="read the loss each step (adds a sync)")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # trainsim's fp32 training means TF32 GEMMs (as Megatron)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    dtype = K.torch_dtype(precision)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    measured = measure_training(args, device, dtype)

    if args.system:
        system = args.system
    elif device.type == "cpu":
        system = str(cpu_system(out, dtype))
    else:
        key = gpu_key(torch.cuda.get_device_name(device))
        if key not in PRESETS:
            raise SystemExit(f"no system preset for {key}; give --system")
        system = PRESETS[key]
    (out / "model.json").write_text(json.dumps(model_json(args), indent=2))
    (out / "calibration.yaml").write_text("iteration_overhead_s: 0.0\n")
    job = ["--model", str(out / "model.json"), "--system", system, "--num-gpus", "1", "--mbs", str(args.mbs),
           "--gbs", str(args.mbs), "--seq-length", str(args.seq), f"--{precision}"]

    table = args.op_costs
    profile_s = 0.0
    if table is None:
        table = str(out / "ops.parquet")
        t0 = time.perf_counter()
        threads = ["--threads", str(torch.get_num_threads())] if device.type == "cpu" else []
        trainsim("profile", *job, "--device", args.device, "--out", table, "--reps", str(args.reps),
                 "--optimizer-dtype", precision, "--quiet", *threads, *args.profile_arg)
        profile_s = time.perf_counter() - t0
    calib = ["--calibration", str(out / "calibration.yaml")]
    with_tables = json.loads(trainsim("predict", *job, *calib, "--op-costs", table, "--json"))
    analytic = json.loads(trainsim("predict", *job, *calib, "--json"))

    t = measured["step_s"]
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "torch": torch.__version__, "precision": precision,
        "config": {k: getattr(args, k) for k in ("layers", "hidden", "heads", "vocab", "seq", "mbs", "dropout")},
        "system": system, "measured": measured, "profile_wall_s": profile_s, "table": table,
        "predicted_measured_tables_s": with_tables["iteration_time_s"],
        "predicted_analytic_s": analytic["iteration_time_s"],
        "error_measured_tables": with_tables["iteration_time_s"] / t - 1,
        "error_analytic": analytic["iteration_time_s"] / t - 1,
        "measured_compute_fraction": with_tables["measured_compute_fraction"],
        "breakdown_measured_tables_s": with_tables["breakdown_s"],
        "breakdown_analytic_s": analytic["breakdown_s"],
    }
    (out / "results.json").write_text(json.dumps(result, indent=2))
    print(f"device {result['device']} ({precision}, {result['threads']} threads); "
          f"{args.layers} layers, hidden {args.hidden}, seq {args.seq}, mbs {args.mbs}, "
          f"{measured['params'] / 1e6:.1f}M params")
    print(f"measured step             {t * 1e3:9.2f} ms  (median of {measured['steps']}, "
          f"min {measured['step_min_s'] * 1e3:.2f}, max {measured['step_max_s'] * 1e3:.2f})")
    for label, key in (("predict --op-costs", "measured_tables"), ("predict (analytic)", "analytic")):
        p = result[f"predicted_{key}_s"]
        err = result[f"error_{key}"]
        print(f"{label:<25} {p * 1e3:9.2f} ms  error {err:+.1%}")
    print(f"measured compute fraction {result['measured_compute_fraction']:.3f}; results in {out / 'results.json'}")
    if not math.isfinite(result["error_measured_tables"]):
        raise SystemExit("non-finite prediction")
    return result


if __name__ == "__main__":
    main()
