"""Regenerate the report screenshots in docs/images/ (``python scripts/make_screenshots.py``).

Writes the pages of the three released straggler traces (``trainsim whatif --html``), a GPT-3 175B event-engine
prediction with one slow GPU (``trainsim predict --engine event --slow-rank 17=1.5 --html``), the vTrain MT-NLG search
(``trainsim search --html``) and a compute-optimal plan (``trainsim plan --html``), opens each in headless chromium
from ``file://``, checks that it loads with no console error and no network request, and saves a screenshot.

Needs the shared data beside the repository (``../shared``), the ``dev`` extra (playwright) and Debian's chromium.
``--keep DIR`` keeps the HTML pages there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsim.cli import main  # noqa: E402
from trainsim.report.browser import chromium, open_report, unavailable_reason  # noqa: E402

TRACES = REPO.parent / "shared" / "data" / "straggler-traces"
PAGES: dict[str, list[str]] = {
    "whatif-ST": ["whatif", str(TRACES / "trace-ST.parquet")],
    "whatif-SE": ["whatif", str(TRACES / "trace-SE.parquet")],
    "whatif-AR": ["whatif", str(TRACES / "trace-AR.parquet")],
    "predict-gpt3-175b-slow-gpu": [
        "predict", "-m", "gpt3-175b", "-s", "dgx-a100", "-n", "1024", "--tp", "8", "--pp", "16", "--mbs", "1",
        "--gbs", "1536", "--seq-length", "2048", "--recompute-granularity", "full", "--fp16", "--train-tokens",
        "300e9", "--engine", "event", "--slow-rank", "17=1.5"],
    "search-mt-nlg": [
        "search", "-m", "mt-nlg-530b", "-s", "dgx-a100", "--tp", "4,8,16", "--dp", "1,2,3,4,5,6,8,10,12,15,16,20,24,30",
        "--pp", "3,5,7,15,21,35,105", "--gbs", "1920", "--recompute-granularity", "full", "--train-tokens", "270e9",
        "--others", "default", "--objective", "cost", "--no-progress"],
    "plan-3360-a100-30-days": ["plan", "-s", "dgx-a100", "-n", "3360", "--days", "30"],
}
#: Screenshots are cut at this height (pixels) to keep the images small.
MAX_HEIGHT = 2800


def write_pages(out: Path, names: list[str]) -> dict[str, Path]:
    """Run each command with ``--html`` (and ``--json``, to keep the terminal quiet); return the pages."""
    import contextlib
    import io

    pages = {}
    for name in names:
        path = out / f"{name}.html"
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main([*PAGES[name], "--json", "--html", str(path)])
            except SystemExit as exc:
                if exc.code:
                    raise
        pages[name] = path
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return pages


def screenshot(pages: dict[str, Path], images: Path) -> None:
    """Open every page in headless chromium, check it is clean, and save a screenshot."""
    with chromium() as browser:
        for name, path in pages.items():
            loaded = open_report(browser, path, width=1360, height=900)
            problems = loaded.console_errors + loaded.page_errors + loaded.other_requests
            if problems:
                raise SystemExit(f"{path}: {problems}")
            page = loaded.page
            height = min(int(page.evaluate("() => document.documentElement.scrollHeight")), MAX_HEIGHT)
            target = images / f"report-{name}.png"
            page.screenshot(path=str(target), full_page=True, clip={"x": 0, "y": 0, "width": 1360, "height": height})
            page.close()
            print(f"wrote {target}")


def cli() -> None:
    """Command line of the script."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the HTML pages in this directory")
    parser.add_argument("--only", nargs="*", choices=sorted(PAGES), help="only these pages")
    parser.add_argument("--images", type=Path, default=REPO / "docs" / "images", help="where the PNGs go")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"cannot take screenshots: {reason}")
    if not TRACES.is_dir():
        raise SystemExit(f"the straggler traces are not at {TRACES}")
    args.images.mkdir(parents=True, exist_ok=True)
    names = args.only or list(PAGES)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        screenshot(write_pages(out, names), args.images)


if __name__ == "__main__":
    cli()
