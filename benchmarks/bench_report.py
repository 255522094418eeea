"""Benchmark of the HTML reports: time to build and write each page (the analysis itself excluded) and its size.

Pages: the three released straggler traces (what-if), GPT-3 175B on 1024 A100s with one slow GPU (event engine),
the same job with the analytic engine, and the vTrain MT-NLG search. Each page is built ``--repeat`` times from the
same result; the best time is reported.

    python benchmarks/bench_report.py [--repeat 3] [--browser]

``--browser`` also opens each page in headless chromium from ``file://`` and times it until drawn (``data-ready``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def _traces() -> Path:
    env = os.environ.get("TRAINSIM_SHARED")
    return (Path(env) if env else REPO.parent / "shared") / "data" / "straggler-traces"


def cases() -> list[tuple[str, Callable[[], Any], Callable[[Any, Path], Path]]]:
    """(name, compute the result, write its page)."""
    from trainsim.predictor import predict
    from trainsim.report.predict import write_predict_report
    from trainsim.report.search import write_search_report
    from trainsim.report.whatif import write_whatif_report
    from trainsim.search import search
    from trainsim.search.space import SearchSpace
    from trainsim.spec.job import Job
    from trainsim.spec.parallelism import Parallelism
    from trainsim.spec.presets import load_model, load_system
    from trainsim.spec.training import Training
    from trainsim.whatif import analyze_trace

    def gpt3() -> Job:
        return Job(model=load_model("gpt3-175b"), system=load_system("dgx-a100"), num_gpus=1024,
                   parallelism=Parallelism(tp=8, pp=16),
                   training=Training(micro_batch_size=1, global_batch_size=1536, seq_length=2048,
                                     recompute_granularity="full", precision="fp16", train_tokens=300e9))

    def mtnlg() -> Any:
        space = SearchSpace(model="mt-nlg-530b", system="dgx-a100", tp=[4, 8, 16], pp=[3, 5, 7, 15, 21, 35, 105],
                            dp=[1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 20, 24, 30], recompute=["full"],
                            training=Training(global_batch_size=1920, seq_length=2048, train_tokens=270e9),
                            others="default")
        return search(space, objective="cost", workers=1)

    out: list[tuple[str, Callable[[], Any], Callable[[Any, Path], Path]]] = [
        (f"whatif {j}", lambda j=j: analyze_trace(_traces() / f"trace-{j}.parquet"), write_whatif_report)
        for j in ("ST", "SE", "AR")]
    out += [("predict GPT-3 175B event, slow GPU", lambda: predict(gpt3(), "event", slow_rank={17: 1.5}),
             write_predict_report),
            ("predict GPT-3 175B analytic", lambda: predict(gpt3()), write_predict_report),
            ("search MT-NLG (294 plans)", mtnlg, write_search_report)]
    return out


def main() -> None:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--browser", action="store_true", help="also time loading each page in headless chromium")
    args = parser.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"| page | build + write (best of {args.repeat}) | size |" + (" load in chromium |" if args.browser else ""))
    print("|---|---:|---:|" + ("---:|" if args.browser else ""))
    import contextlib

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        browser = None
        if args.browser:
            from trainsim.report.browser import chromium

            browser = stack.enter_context(chromium())
        for name, compute, write in cases():
            result = compute()
            path = Path(tmp) / "page.html"
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                write(result, path)
                best = min(best, time.perf_counter() - t0)
            row = f"| {name} | {best:.2f} s | {path.stat().st_size / 1e6:.1f} MB |"
            if browser is not None:
                from trainsim.report.browser import open_report

                load = float("inf")
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    loaded = open_report(browser, path)
                    load = min(load, time.perf_counter() - t0)
                    loaded.page.close()
                row += f" {load:.2f} s |"
            print(row)


if __name__ == "__main__":
    main()
