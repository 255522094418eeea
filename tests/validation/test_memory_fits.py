"""Every measured run really ran: the memory model must say it fits (issue 11: no real run predicted OOM)."""

from __future__ import annotations

import pytest

from trainsim.predictor import predict
from trainsim.spec.framework import load_framework
from trainsim.validation.report import all_measurements
from trainsim.workload.memory import StageMemory, device_peak, main_grad_copy_bytes


@pytest.mark.parametrize("row", all_measurements(), ids=lambda r: r.id)
def test_every_measured_run_is_predicted_to_fit(row):
    mem = predict(row.job).memory
    assert mem.fits, f"{row.id}: predicted {mem.peak_bytes / 1e9:.1f} GB > {mem.capacity_bytes / 1e9:.1f} GB"


def _stage(activations: float, reserve: float) -> StageMemory:
    return StageMemory(stage=0, weights_bytes=10e9, gradients_bytes=10e9, optimizer_bytes=20e9,
                       activations_bytes=activations, other_bytes=1e9 + reserve, allocator_reserve_bytes=reserve)


def test_allocator_reserve_makes_a_plan_tight_not_unfit():
    cap = 80e9
    peak, fits, tight = device_peak([_stage(36e9, 4e9)], cap)  # required 77 GB, with the reserve 81 GB
    assert fits and tight and peak == cap
    peak, fits, tight = device_peak([_stage(42e9, 4e9)], cap)  # required 83 GB: out of memory
    assert not fits and not tight and peak == pytest.approx(87e9)
    peak, fits, tight = device_peak([_stage(10e9, 1e9)], cap)
    assert fits and not tight and peak == pytest.approx(52e9)


def test_fp32_copy_of_16bit_gradients_is_a_step_transient():
    mc = load_framework("megatron-core")
    assert main_grad_copy_bytes(mc, "bf16", False) == 4.0  # bf16 grads, fp32 master weights: .float() copies
    assert main_grad_copy_bytes(mc, "bf16", True) == 0.0  # fp32 grads: .float() is a view
    assert main_grad_copy_bytes(load_framework("hf-transformers"), "bf16", False) == 0.0  # no master weights
