"""Fixtures of the report tests: a headless chromium (skipped, with the reason, where it cannot run)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from trainsim.report.browser import chromium, unavailable_reason


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless chromium shared by the browser tests."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"browser tests need chromium and playwright: {reason}")
    with chromium() as b:
        yield b
