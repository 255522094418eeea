"""Fixtures for the what-if tests: the released traces (when present), synthetic traces and a CLI runner."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import typer.main

from trainsim.whatif.synthetic import TraceOpTimes


def shared_dir() -> Path:
    """The project's shared data folder: $TRAINSIM_SHARED, else ../shared beside the repository."""
    env = os.environ.get("TRAINSIM_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared"


def traces_dir() -> Path:
    return shared_dir() / "data" / "straggler-traces"


@pytest.fixture(scope="session")
def traces() -> Path:
    """Folder of the released straggler traces; skips the test when it is absent."""
    d = traces_dir()
    if not (d / "trace-ST.parquet").is_file():
        pytest.skip(f"released straggler traces not found at {d} (set TRAINSIM_SHARED to the shared folder)")
    return d


@pytest.fixture
def hand_times() -> TraceOpTimes:
    """Exactly representable op times: stage 1 computes 2x slower, the rest is free (worked by hand)."""
    return TraceOpTimes.compute_only(forward=[1.0, 2.0], backward=[2.0, 4.0])


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``trainsim ARGS...`` through the real entry point; return (exit code, stdout, stderr).

    Typer turns an app with a single registered command into that command; the patch keeps ``trainsim`` a
    command group whatever other commands are installed, so ``trainsim whatif ...`` resolves as in the full
    CLI.
    """
    from trainsim.cli import app, main

    original = typer.main.get_command
    monkeypatch.setattr(typer.main, "get_command", lambda t: typer.main.get_group(t) if t is app else original(t))

    def run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
