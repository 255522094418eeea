"""benchmarks/h100/measure_training.py (run on a GPU machine, not in CI) names every configuration the packaged
single-GPU data holds, with the same shape."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from importlib import resources
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "h100" / "measure_training.py"


def test_every_measured_line_is_a_configuration_of_the_script():
    names = set()
    for group in ("hf", "megatron", "moe", "host", "heldout"):
        out = subprocess.run([sys.executable, str(SCRIPT), "--list", group], capture_output=True, text=True, check=True)
        names |= set(out.stdout.split())
    for folder in ("gpu-h100", "gpu-h200"):
        text = (resources.files("trainsim") / "data" / folder / "measured.jsonl").read_text()
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert rows and {r["name"] for r in rows} <= names
        assert all(r.get("process", "").startswith("fresh") and "iter_s" in r for r in rows)
        configs = runpy.run_path(str(SCRIPT))["CONFIGS"]  # the script imports torch only when it measures
        for r in rows:
            c = configs[r["name"]]
            assert all(r[k] == c[k] for k in ("L", "h", "heads", "kv", "ffn", "V", "seq", "mbs"))
            assert r["num_microbatches"] == c["nmb"] and r["recompute"] == bool(c.get("recompute"))
