"""``trainsim --version``; ``trainsim presets`` readable at 80 columns with a source column (issue 15, item 7)."""

from __future__ import annotations

import trainsim
from cli_helpers import run
from trainsim.spec.presets import list_models, list_systems


def test_version(capsys):
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"trainsim {trainsim.__version__}"


def test_presets_fit_80_columns_with_whole_names_and_sources(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(["presets"], capsys)
    assert code == 0
    assert all(len(line) <= 80 for line in out.splitlines())
    words = set(out.split())
    for name in (*list_models(), *list_systems()):
        assert name in words, f"{name} is cut"
    assert out.count("source") >= 2
