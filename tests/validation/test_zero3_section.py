"""The ZeRO-3 / FSDP-at-scale section of docs/VALIDATION.md: predictions for sharded stacks on 1,000+ A100."""

from __future__ import annotations

from trainsim.validation.report import ZERO3_CASES, ZERO3_FRAMEWORKS, zero3_scale_lines


def test_zero3_section_rows_and_per_layer_gathers():
    lines = zero3_scale_lines()
    assert lines[0].startswith("## ZeRO-3 / FSDP at 1,000+ GPUs")
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| llama")]
    assert len(rows) == len(ZERO3_CASES) * len(ZERO3_FRAMEWORKS)
    gather = {(r[1].strip(), r[2].strip(" `")): float(r[7]) for r in rows}
    for n in ("1024", "2048"):
        # DeepSpeed's per-sub-module gathers each pay the ring latency of the whole group: dearer than one per layer
        assert gather[n, "deepspeed"] > gather[n, "fsdp"]
    # the ring latency grows with the group: the same layer's gather costs more over 2048 GPUs than over 1024
    assert gather["2048", "fsdp"] > gather["1024", "fsdp"]
