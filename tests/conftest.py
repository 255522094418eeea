"""Shared fixtures: where ``../shared`` is (CI keeps it beside the clone), and a skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path | None:
    """``$TRAINSIM_SHARED`` or ``../shared`` beside the repository, if present."""
    env = os.environ.get("TRAINSIM_SHARED")
    for candidate in ([Path(env)] if env else []) + [REPO.parent / "shared"]:
        if (candidate / "data").is_dir():
            return candidate
    return None


@pytest.fixture
def shared() -> Path:
    """The shared data folder; skips the test when it is not available."""
    path = shared_dir()
    if path is None:
        pytest.skip("../shared (published measurements and straggler traces) is not beside the repository")
    return path
