"""Regenerate the 2D-tensor-parallelism / NVLink-domain study of docs/search.md (case study 3, NERSC findings).

Runs ``trainsim search`` (the commands printed below, exactly as documented) for the long-sequence ViT on ERA5
(``vit-era5``, 259,200 tokens) and GPT-3 1T on B200 with NVLink domains of 4, 8 and 72 GPUs, and prints one markdown
table row per (model, domain, GPU count): the best plan overall, the best plan with 1D tensor parallelism only, the
best with the SUMMA grid, and how much the grid / sequence sharding gains.

    python scripts/summa_study.py [--quick] [--out table.md]

``--quick`` runs the smallest GPU count only. Takes a few minutes per model and domain on one CPU core.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

DOMAINS = (4, 8, 72)
#: model → (GPU counts, search flags). Both searches list --tensor-parallel-mode 1d,summa (open rows and grid
#: placement); everything else as in case study 2 (B200, one 400 Gb/s NIC per GPU, distributed optimizer).
STUDIES: dict[str, tuple[tuple[int, ...], list[str]]] = {
    "vit-era5": ((1024, 4096, 16384), [
        "--gbs", "128", "--tp", "4,8,16,32,64", "--cp", "1,2,4,8,16,32", "--pp", "1,2,4,8", "--vpp", "1",
        "--mbs", "1", "--recompute-granularity", "full", "--zero-stage", "1", "--sp", "true",
        "--rank-order", "tp-cp-ep-dp-pp", "--tensor-parallel-mode", "1d,summa"]),
    "gpt3-1t": ((1024, 4096, 16384), [
        "--gbs", "3072", "--train-tokens", "450e9", "--tp", "4,8,16,32", "--cp", "1", "--pp", "16,32,64",
        "--vpp", "1,4", "--mbs", "1", "--recompute-granularity", "none,full", "--zero-stage", "1", "--sp", "true",
        "--rank-order", "tp-cp-ep-dp-pp", "--tensor-parallel-mode", "1d,summa"]),
}


def command(model: str, domain: int, gpus: int) -> list[str]:
    """The ``trainsim search`` command of one cell."""
    return ["trainsim", "search", "-m", model, "-s", "dgx-b200", "--gpus-per-node", str(domain), "--nics-per-node",
            str(domain), "-n", str(gpus), *STUDIES[model][1], "--objective", "time", "--top", "0", "--json"]


def _run(cmd: list[str]) -> dict:
    argv = [sys.executable, "-c", "from trainsim.cli import main; main()", *cmd[1:]]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def _plan(c: dict | None) -> str:
    if c is None:
        return "—"
    grid = " 1d"
    if c["tensor_parallel_mode"] == "summa":
        grid = f" summa {c['tp_rows']}×{c['tp'] // c['tp_rows']} ({c['tp_inner']})"
    return f"tp {c['tp']}{grid}, cp {c['cp']}, pp {c['pp']}, dp {c['dp']}"


def _time(c: dict | None) -> str:
    return "—" if c is None else f"{c['iteration_time_s']:.2f}"


def _best(cands: list[dict], pred) -> dict | None:  # type: ignore[no-untyped-def]
    for c in cands:  # ranked: fastest first
        if pred(c):
            return c
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smallest GPU count only")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--models", default=",".join(STUDIES), help="comma-separated subset of " + ",".join(STUDIES))
    args = ap.parse_args()
    if args.out:
        from trainsim.io.atomic import check_output_path

        check_output_path(args.out, "--out", directory=False)
    rows = ["| model | NVLink domain | GPUs | best plan | iteration (s) | MFU | best 1D plan | 1D (s) | best SUMMA "
            "(s) | no sequence sharding (s) |",
            "|---|---:|---:|---|---:|---:|---|---:|---:|---:|"]
    best_time: dict[tuple[str, int, int], float] = {}
    for model in args.models.split(","):
        counts, _ = STUDIES[model]
        for gpus in counts[:1] if args.quick else counts:
            for domain in DOMAINS:
                cmd = command(model, domain, gpus)
                t0 = time.perf_counter()
                data = _run(cmd)
                cands = data["candidates"]
                best = cands[0] if cands else None
                one_d = _best(cands, lambda c: c["tensor_parallel_mode"] == "1d")
                grid = _best(cands, lambda c: c["tensor_parallel_mode"] == "summa")
                # neither context parallelism nor grid rows split the sequence
                unsplit = _best(cands, lambda c: c["cp"] == 1 and (c["tensor_parallel_mode"] == "1d"
                                                                   or c["tp_rows"] == 1))
                print(f"# {' '.join(cmd)}  ({time.perf_counter() - t0:.0f} s, {len(cands)} ranked)", file=sys.stderr)
                if best is None:
                    rows.append(f"| {model} | {domain} | {gpus:,} | nothing fits | | | | | | |")
                    continue
                best_time[model, gpus, domain] = best["iteration_time_s"]
                rows.append(
                    f"| {model} | {domain} | {gpus:,} | {_plan(best)} | {best['iteration_time_s']:.2f} | "
                    f"{best['mfu']:.1%} | {_plan(one_d)} | "
                    f"{_time(one_d)} | "
                    f"{_time(grid)} | {_time(unsplit)} |")
    rows += ["", "| model | GPUs | best iteration, domain 4 / domain 72 | domain 8 / domain 72 |",
             "|---|---:|---:|---:|"]
    for model, gpus in dict.fromkeys((m, n) for m, n, _ in best_time):
        t = {d: best_time.get((model, gpus, d)) for d in DOMAINS}
        if t[4] and t[8] and t[72]:
            rows.append(f"| {model} | {gpus:,} | {t[4] / t[72]:.2f}× | {t[8] / t[72]:.2f}× |")
    text = "\n".join(rows)
    print(text)
    if args.out:
        from trainsim.io.atomic import write_text_atomic

        write_text_atomic(Path(args.out), text + "\n")


if __name__ == "__main__":
    main()
