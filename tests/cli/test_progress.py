"""Progress for long work: bars on a terminal, plain periodic lines otherwise, nothing for quick work (item 7)."""

from __future__ import annotations

import io
import time

import trainsim.cli.progress as progress


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_quick_work_prints_nothing():
    out = io.StringIO()
    with progress.counted("search", stream=out) as tick:
        for i in range(100):
            tick(i + 1, 100, "analytic estimates")
    assert out.getvalue() == ""


def test_plain_lines_when_not_a_terminal(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    out = io.StringIO()
    with progress.counted("validate", stream=out) as tick:
        for i in range(40):
            clock.t = i * 1.0
            tick(i, 40, "published runs")
        tick(40, 40, "published runs")
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("validate: ") for line in lines)
    assert "40/40 published runs (100%)" in lines[-1]
    assert len(lines) <= 5  # one line every 10 s, not one per item


def test_bar_on_a_terminal(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    with progress.counted("search", stream=out) as tick:
        clock.t = 3.0
        tick(5, 10, "analytic estimates")
    assert "search: analytic estimates" in out.getvalue()


def test_activity_logs_long_runs(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.05)
    out = io.StringIO()
    with progress.activity("event engine", stream=out):
        time.sleep(0.3)
    text = out.getvalue()
    assert "event engine: running" in text and "event engine: done in" in text
    quick = io.StringIO()
    with progress.activity("event engine", stream=quick):
        pass
    assert quick.getvalue() == ""
