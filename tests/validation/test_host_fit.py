"""host_op_s is what our host-bound H100 measurements say, and it predicts the MoE steps it was not fitted on."""

from __future__ import annotations

import pytest

from trainsim.predictor import predict
from trainsim.spec.framework import load_framework
from trainsim.validation.h100 import load_h100_runs
from trainsim.validation.host_fit import HOST_BOUND_TOKENS, fit_host_op_s, host_op_samples

#: the profiles whose host_op_s is the measured value of each measured stack
MEASURED = {"megatron-core-local": ("megatron-core-local", "megatron-core", "nemo", "megatron-lm-2021",
                                    "megatron-deepspeed"),
            "hf-transformers": ("hf-transformers", "fsdp", "deepspeed", "torchtitan", "meta-llama3")}


def test_profiles_carry_the_fitted_host_time():
    fit = fit_host_op_s()
    assert set(fit) == set(MEASURED)
    for measured, profiles in MEASURED.items():
        assert len(host_op_samples()[measured]) >= 2
        for name in profiles:  # two significant digits
            assert load_framework(name).host_op_s == pytest.approx(fit[measured], rel=0.04), name


def test_host_bound_moe_steps_not_fitted_on_are_predicted():
    # the 2,048-token MoE steps (4 to 128 experts) are outside the fit (it takes <= 512-token micro-batches only)
    runs = [r for r in load_h100_runs() if r.id.startswith("h100_mcore-a3b-") and not r.id.endswith("dense")]
    assert len(runs) >= 5
    assert all(r.job.training.micro_batch_size * r.job.seq_length > HOST_BOUND_TOKENS for r in runs)
    errors = [predict(r.job).iteration_time_s / r.measured_iter_s - 1 for r in runs]
    assert max(abs(e) for e in errors) < 0.25
    assert sum(abs(e) for e in errors) / len(errors) < 0.12


def test_transformers_5_rows_run_grouped_experts():
    """The rows measured with transformers 5 are modelled with ``hf-transformers@5``, whose MoE experts run one grouped
    GEMM (measured: ``aten::_grouped_mm``, 2 host syncs per step); 4.x looped over the experts in Python."""
    run = next(r for r in load_h100_runs() if r.id == "h100_hf-mixtral-8e")
    assert run.job.framework.version == "5" and run.job.framework.moe_expert_launch == "grouped_kernel"
    assert load_framework("hf-transformers").moe_expert_launch == "python_loop"
    assert abs(predict(run.job).iteration_time_s / run.measured_iter_s - 1) < 0.15
