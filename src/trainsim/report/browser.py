"""Open report pages in a real headless browser (Debian's chromium driven by Python ``playwright``).

Used by the browser tests and ``scripts/make_screenshots.py``; needs the ``dev`` extra (``playwright``) and the
system ``chromium`` (``apt-get install chromium``; ``playwright install`` is never needed). :func:`open_report`
loads a page from ``file://`` and records every console error, page error and request, so that a test can assert
that a page is self-contained.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Where Debian installs chromium; ``$TRAINSIM_CHROMIUM`` overrides it.
CHROMIUM = "/usr/bin/chromium"
#: Flags of a quiet, sandbox-free headless chromium that phones nowhere.
CHROMIUM_ARGS: tuple[str, ...] = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                  "--disable-component-update", "--no-first-run")


def chromium_path() -> str | None:
    """The chromium executable, or ``None`` when it is not installed."""
    candidate = os.environ.get("TRAINSIM_CHROMIUM") or CHROMIUM
    if Path(candidate).is_file() and os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("chromium")


def unavailable_reason() -> str | None:
    """Why pages cannot be checked in a browser here (``None`` when they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return f"chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium ``Browser`` (playwright), closed on exit."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError(unavailable_reason() or "chromium not found")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=list(CHROMIUM_ARGS), headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class LoadedPage:
    """A page opened from disk, with what happened while it loaded."""

    page: Any
    url: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def other_requests(self) -> list[str]:
        """Every request but the page's own document (a self-contained page makes none)."""
        return [r for r in self.requests if r != self.url]


def open_report(browser: Any, path: str | os.PathLike[str], width: int = 1360, height: int = 900) -> LoadedPage:
    """Open ``path`` from ``file://`` in a new page and wait until it is drawn (``<body data-ready="1">``)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    url = Path(path).resolve().as_uri()
    loaded = LoadedPage(page, url)
    page.on("console", lambda msg: loaded.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: loaded.page_errors.append(str(exc)))
    page.on("request", lambda req: loaded.requests.append(req.url))
    page.goto(url, wait_until="load")
    try:
        page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
    except Exception as exc:  # playwright's TimeoutError: say what the page reported
        raise RuntimeError(f"{path} did not finish drawing: page errors {loaded.page_errors}, console errors "
                           f"{loaded.console_errors}") from exc
    return loaded
