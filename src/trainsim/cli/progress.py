"""Progress on stderr for work that takes more than a moment.

Two shapes, both silent for the first :data:`DELAY_S` seconds (quick runs print nothing):

- :func:`counted` — work with a known size (candidates, rows, operators): a rich progress bar when stderr is a
  terminal, else a plain line every :data:`LOG_EVERY_S` seconds (CI logs, pipes) such as
  ``search: 1,200/4,000 analytic estimates (30%), 12 s``;
- :func:`activity` — one long step of unknown length (an event-engine run, a plan search): a spinner on a terminal,
  else a line every :data:`LOG_EVERY_S` seconds.

Both are context managers and draw without a refresh thread while counting (safe with forked worker processes);
:func:`activity` uses a timer thread, as the work it watches gives no callbacks.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: Nothing is shown for work shorter than this (seconds).
DELAY_S = 2.0
#: Interval of the plain log lines when stderr is not a terminal (seconds).
LOG_EVERY_S = 10.0

Tick = Callable[..., None]


def _is_tty(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def _elapsed(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


@contextmanager
def counted(label: str, *, enabled: bool = True, stream: TextIO | None = None) -> Iterator[Tick]:
    """Yield ``tick(done, total, what="")`` (``what`` names the phase or item, e.g. ``"analytic estimates"``)."""
    out = stream or sys.stderr
    start = time.perf_counter()
    state: dict[str, Any] = {"bar": None, "tasks": {}, "last_draw": 0.0, "last_log": 0.0, "logged": False}
    tty = _is_tty(out)

    def tick(done: int, total: int, what: str = "") -> None:
        if not enabled:
            return
        now = time.perf_counter()
        elapsed = now - start
        if elapsed < DELAY_S:
            return  # quick work shows nothing
        if tty:
            if state["bar"] is None:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                state["bar"] = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                                        console=Console(file=out), auto_refresh=False, transient=True)
                state["bar"].start()
            bar = state["bar"]
            key = what or label
            if key not in state["tasks"]:
                state["tasks"][key] = (bar.add_task(f"{label}: {what}" if what else label, total=total, rate=""), now)
            task, t0 = state["tasks"][key]
            rate = f"{done / (now - t0):,.0f}/s" if now - t0 > 0.5 and done else ""
            bar.update(task, completed=done, total=total, rate=rate)
            if now - state["last_draw"] > 0.1 or done >= total:
                bar.refresh()
                state["last_draw"] = now
        elif now - state["last_log"] >= LOG_EVERY_S or (done >= total and state["logged"]):
            pct = f" ({done / total:.0%})" if total else ""
            name = f" {what}" if what else ""
            out.write(f"{label}: {done:,}/{total:,}{name}{pct}, {_elapsed(elapsed)}\n")
            out.flush()
            state["last_log"] = now
            state["logged"] = True

    try:
        yield tick
    finally:
        if state["bar"] is not None:
            state["bar"].stop()
        out.flush()


@contextmanager
def activity(label: str, *, enabled: bool = True, stream: TextIO | None = None) -> Iterator[None]:
    """Show that ``label`` is still running (spinner on a terminal, a line every 10 s otherwise) after 2 s."""
    if not enabled:
        yield
        return
    out = stream or sys.stderr
    tty = _is_tty(out)
    done = threading.Event()
    start = time.perf_counter()
    status: dict[str, Any] = {"spinner": None, "logged": False}

    def watch() -> None:
        if done.wait(DELAY_S):
            return
        if tty:
            from rich.console import Console

            status["spinner"] = Console(file=out).status(f"{label} …")
            status["spinner"].start()
            done.wait()
            return
        while not done.is_set():
            out.write(f"{label}: running, {_elapsed(time.perf_counter() - start)}\n")
            out.flush()
            status["logged"] = True
            done.wait(LOG_EVERY_S)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if status["spinner"] is not None:
            status["spinner"].stop()
        if status["logged"]:
            out.write(f"{label}: done in {_elapsed(time.perf_counter() - start)}\n")
            out.flush()
