"""The ZeRO-3 / FSDP-at-scale section of docs/VALIDATION.md: predictions for sharded stacks from 128 to 2,048 A100."""

from __future__ import annotations

from trainsim.validation.report import ZERO3_CASES, ZERO3_FRAMEWORKS, zero3_scale_lines


def _rows() -> dict[tuple[str, str, str], list[str]]:
    lines = zero3_scale_lines()
    assert lines[0].startswith("## ZeRO-3 / FSDP at scale")
    rows = [line.split("|")[1:-1] for line in lines if line.startswith(("| llama", "| gpt3"))]
    assert len(rows) == len(ZERO3_CASES) * len(ZERO3_FRAMEWORKS)
    return {(r[0].strip(), r[1].strip(), r[2].strip(" `")): [c.strip() for c in r] for r in rows}


def test_zero3_section_rows_and_per_layer_gathers():
    rows = _rows()
    gather = {k: float(r[8]) for k, r in rows.items()}
    for n in ("1024", "2048"):
        # DeepSpeed's per-sub-module gathers each pay the ring latency of the whole group: dearer than one per layer
        assert gather["llama2-70b", n, "deepspeed"] > gather["llama2-70b", n, "fsdp"]
    # the ring latency grows with the group: the same layer's gather costs more over 2048 GPUs than over 1024
    assert gather["llama2-70b", "2048", "fsdp"] > gather["llama2-70b", "1024", "fsdp"]
    assert {r[7] for k, r in rows.items() if not k[2].startswith("deepspeed")} == {"1"}
    # 2021's DeepSpeed: nothing overlaps and the host copies per rank, so its exposed DP time grows with the group
    for model, n in (("llama2-70b", "1024"), ("gpt3-175b", "2048")):
        assert float(rows[model, n, "deepspeed@0.3"][6]) > 2 * float(rows[model, n, "deepspeed"][6])


def test_the_schedule_mechanisms_only_add_time_and_exposure_grows_with_scale():
    rows = _rows()
    for r in rows.values():
        assert float(r[9]) <= float(r[3]) * 1.001  # mechanisms off: never slower
    for model, small, large in (("llama2-7b", "128", "512"), ("llama2-13b", "128", "512"),
                                ("llama2-70b", "1024", "2048"), ("gpt3-175b", "1024", "2048")):
        for fw in ZERO3_FRAMEWORKS:
            assert float(rows[model, large, fw][6]) >= float(rows[model, small, fw][6])
