"""The single-H100 source (own framework profiles, no per-row constant) and the ranking metrics."""

from __future__ import annotations

import math

import pytest

from trainsim.predictor import predict
from trainsim.validation.h100 import h100_measurements, load_h100_runs, load_h200_runs, run_of, system_of
from trainsim.validation.ranking import rank_groups, spearman, top1_regret


def test_h100_rows_are_modelled_with_their_own_stacks():
    runs = load_h100_runs()
    assert {r.framework for r in runs} == {"megatron-core-local", "hf-transformers"}
    for r in runs:
        assert r.job.world_size == 1 and r.job.framework.name == r.framework
    assert all(m.source == "h100" for m in h100_measurements())


def test_measured_rows_read_the_gpu_attention_path_and_compilation():
    base = dict(framework="hf-transformers", name="x", L=2, h=256, heads=4, kv=4, ffn=512, V=1000, seq=256, mbs=1,
                num_microbatches=1, swiglu=True, recompute=False, iter_s=0.1, peak_alloc_bytes=1e9)
    plain = run_of(base)
    assert plain.job.system.name == "dgx-h100" and plain.job.attention_path == "flash" and plain.memory_comparable
    eager = run_of(base | dict(attn_implementation="eager", gpu="NVIDIA H200 (132 SMs, 139.8 GiB)"), "h200")
    assert eager.job.system.name == "hgx-h200" and eager.job.attention_path == "eager" and eager.id == "h200_x"
    assert run_of(base | dict(compile=True)).job.framework.torch_compile
    # SDPA runs the kernel library of the PyTorch the line names: cuDNN from 2.11, FlashAttention-2 before
    assert run_of(base | dict(attn_implementation="sdpa", software="PyTorch 2.11.0+cu130, transformers 5.17.0")
                  ).job.framework.flash_kernel == "cudnn"
    assert run_of(base | dict(attn_implementation="sdpa", software="PyTorch 2.4.1, transformers 4.44.0")
                  ).job.framework.flash_kernel == "fa2"
    with pytest.raises(ValueError, match="gpu"):
        system_of({"gpu": "NVIDIA A40"})


def test_h200_rows_are_held_out_and_predicted_on_the_h200_preset():
    runs = load_h200_runs()
    assert len(runs) >= 10 and all(r.job.system.name == "hgx-h200" and r.id.startswith("h200_") for r in runs)
    assert not {r.id for r in runs} & {m.id for m in h100_measurements()}  # never in the fitted rows
    errs = [abs(predict(r.job).iteration_time_s / r.measured_iter_s - 1) for r in runs]
    assert sum(errs) / len(errs) <= 0.10 and max(errs) <= 0.25


def test_h100_times_and_memory_are_within_the_issue_targets():
    errs, mems = [], []
    for r in load_h100_runs():
        p = predict(r.job)
        errs.append(abs(p.iteration_time_s / r.measured_iter_s - 1))
        if r.memory_comparable:
            allocated = max(s.allocated_bytes for s in p.memory.per_stage)
            mems.append(abs(allocated / r.peak_alloc_bytes - 1))
    assert sum(errs) / len(errs) <= 0.10 and max(errs) <= 0.25
    assert sum(mems) / len(mems) <= 0.10 and max(mems) <= 0.25


def test_spearman_and_regret():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1], [1]))
    assert top1_regret([1.0, 1.2, 1.5], [3.0, 2.0, 4.0]) == pytest.approx(0.2)
    assert top1_regret([1.0, 1.2], [1.0, 2.0]) == 0.0
    groups = rank_groups([("s", "a", 1.0, 1.1), ("s", "a", 2.0, 1.0), ("s", "b", 1.0, 1.0)])
    assert len(groups) == 1 and groups[0].runs == 2 and groups[0].spearman == pytest.approx(-1.0)
    assert groups[0].regret == pytest.approx(1.0)
