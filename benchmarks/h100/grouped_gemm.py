"""Expert GEMMs on one GPU: a grouped GEMM versus one GEMM per expert, and the host cost of launching them.

For each expert FFN shape (fc1 ``M x K -> N`` of a mixture-of-experts layer), number of local experts ``E`` and rows
per expert ``M`` (bf16, forward), three timings:

- ``grouped_s``: ``torch._grouped_mm`` (one CUTLASS grouped kernel, as torchtitan's MoE runs), CUDA-event timed;
- ``loop_gpu_s``: ``E`` separate ``torch.mm`` replayed from a CUDA graph (GPU time alone, no host cost), as
  Megatron-Core's SequentialMLP or a multi-stream cuBLAS grouped GEMM issue them;
- ``loop_eager_s``: the same loop launched eagerly (host dispatch included), wall time with the device synchronised.

Usage (GPU machine): ``python benchmarks/h100/grouped_gemm.py --out DIR`` writes ``DIR/grouped_gemm.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import torch

# (model, K, N) of the expert fc1 (gated: N = 2 x expert FFN) and fc2
SHAPES = [("qwen3-30b-a3b fc1", 2048, 1536), ("qwen3-30b-a3b fc2", 768, 2048),
          ("qwen3-235b fc1", 4096, 3072), ("qwen3-235b fc2", 1536, 4096),
          ("gpt-oss fc1", 2880, 5760), ("gpt-oss fc2", 2880, 2880),
          ("deepseek-v3 fc1", 7168, 4096), ("deepseek-v3 fc2", 2048, 7168)]
EXPERTS = [4, 16, 64]
ROWS = [64, 256, 1024, 4096, 16384]


def events_time(fn, reps: int) -> float:
    """Mean GPU time of ``fn`` over ``reps`` calls (CUDA events) after two warm-ups."""
    fn()
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def wall_time(fn, reps: int) -> float:
    """Mean wall time of ``fn`` (device synchronised after each) after two warm-ups."""
    fn()
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def measure(name: str, w: torch.Tensor, wt: torch.Tensor, m: int) -> dict[str, object]:
    """The three timings of ``E`` experts of ``m`` rows each against weights ``w`` (``E, K, N``)."""
    e, k, n = w.shape
    x = torch.randn(e * m, k, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(m, e * m + 1, m, device="cuda", dtype=torch.int32)
    parts = list(x.split(m))
    reps = max(3, min(50, int(2e12 / (2 * e * m * k * n) + 1)))
    try:
        grouped = events_time(lambda: torch._grouped_mm(x, wt, offs=offs), reps)
    except RuntimeError as err:  # recorded as missing, the loop timings still count
        print(f"_grouped_mm {name} E={e} M={m}: {err}", flush=True)
        grouped = float("nan")

    def loop() -> None:
        for i in range(e):
            torch.mm(parts[i], w[i])
    loop()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        loop()
    loop_gpu = events_time(graph.replay, reps)
    loop_eager = wall_time(loop, reps)
    flop = 2.0 * e * m * k * n
    return dict(shape=name, experts=e, rows_per_expert=m, k=k, n=n, flop=flop, grouped_s=grouped,
                loop_gpu_s=loop_gpu, loop_eager_s=loop_eager, grouped_tflops=flop / grouped / 1e12,
                loop_gpu_tflops=flop / loop_gpu / 1e12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    out = os.path.join(ap.parse_args().out, "grouped_gemm.csv")
    rows = []
    for name, k, n in SHAPES:
        for e in EXPERTS:
            w = torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
            wt = w.transpose(1, 2).contiguous().transpose(1, 2)  # column-major B, as _grouped_mm wants
            for m in ROWS:
                if e * m * max(k, n) * 2 <= 8e9:
                    rows.append(measure(name, w, wt, m))
                    print(rows[-1], flush=True)
            torch.cuda.empty_cache()
    p = torch.cuda.get_device_properties(0)
    with open(out, "w", newline="") as f:
        f.write(f"# {p.name}, PyTorch {torch.__version__}, {time.strftime('%Y-%m-%d', time.gmtime())}\n")
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)


if __name__ == "__main__":
    main()
