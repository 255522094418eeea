"""Held-out published runs outside the calibration data (trainsim/data/public, never fitted): llm-foundry's MPT
benchmarks under FSDP are predicted within the issue's accuracy targets and none is predicted out of memory."""

from __future__ import annotations

import pytest

from trainsim.api import predict
from trainsim.validation.external import external_lines, external_path
from trainsim.validation.measurements import load_table
from trainsim.validation.report import ValidationReport, run_validation


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return run_validation(measurements=external_path("llm_foundry_benchmarks.csv"))


def test_every_llm_foundry_run_is_predicted_with_its_stack_and_fits(report: ValidationReport):
    assert not report.skipped
    assert len(report.rows) == 23
    assert {r.framework for r in report.rows} == {"llm-foundry"}
    jobs = load_table(external_path("llm_foundry_benchmarks.csv")).rows
    assert {(m.job.framework.version, m.job.framework.flash_kernel) for m in jobs} == {("0.2", "fa1")}  # 2023
    assert all(r.fits for r in report.rows), [r.id for r in report.rows if not r.fits]


def test_llm_foundry_runs_are_within_the_accuracy_target(report: ValidationReport):
    errors = [abs(r.error) for r in report.rows]
    assert sum(errors) / len(errors) <= 0.10
    assert max(errors) <= 0.25


def test_the_validation_page_shows_the_held_out_runs():
    lines = external_lines()
    assert lines[0].startswith("## Held-out published runs")
    assert sum(1 for line in lines if line.startswith("| lf") and not line.startswith("| lfm")) == 23
    assert sum(1 for line in lines if line.startswith("| lfm")) == 178
    assert any("every run predicted to fit" in line for line in lines)


def test_llm_foundry_sequence_sweeps_show_no_trend_with_the_sequence_length_on_the_a100s():
    """The other 178 rows of llm-foundry's tables (512 to 65,536 tokens): with the 2023 stack's FlashAttention-1
    kernel the error does not grow with the sequence on the A100s (it did under FlashAttention-2 pricing: -42 % at
    65,536 tokens on the H100), every run is predicted to fit, and the long-sequence runs, where attention is most of
    the time, are within 10 % on average there. On the H100, FlashAttention-1 costs twice FlashAttention-2, which is
    priced at the FlashAttention-3 paper's FlashAttention-2 level (trainsim.cost.attention_kernels.fa2_curves): the
    long-sequence runs read slower than measured, +10 % on average (the paper's "around 2x" is approximate; it is not
    fitted), and stay within 15 %."""
    path = external_path("llm_foundry_more.csv")
    report = run_validation(measurements=path)
    jobs = {m.id: m.job for m in load_table(path).rows}
    assert not report.skipped and len(report.rows) == 178 and all(r.fits for r in report.rows)
    errors = [abs(r.error) for r in report.rows]
    assert sum(errors) / len(errors) <= 0.10
    for gpu, low, high in (("H100-SXM5-80GB", 0.0, 0.15), ("A100-SXM4-80GB", -0.10, 0.10),
                           ("A100-SXM4-40GB", -0.10, 0.10)):
        long = [r.error for r in report.rows
                if jobs[r.id].system.gpu.name == gpu and jobs[r.id].model.seq_length >= 16384]
        assert len(long) >= 8 and low <= sum(long) / len(long) <= high, (gpu, long)


def test_megatron_bridge_dense_runs_are_within_the_target_and_no_run_is_predicted_out_of_memory():
    path = external_path("megatron_bridge_25_11.csv")
    report = run_validation(measurements=path)
    jobs = {m.id: m.job for m in load_table(path).rows}
    assert {r.framework for r in report.rows} == {"nemo"} and all(r.fits for r in report.rows)
    dense = [abs(r.error) for r in report.rows if not jobs[r.id].model.is_moe]
    assert len(dense) == 11 and sum(dense) / len(dense) <= 0.10 and max(dense) <= 0.25
    # DeepSeek-V3's 61 layers over 8-32 virtual stages: the recipe's layout is unstated, so the embedding and the
    # loss weigh one layer each (reported with the row) and every run is predicted
    assert not report.skipped
    deepseek = [m for m in load_table(path).rows if m.job.model.num_layers == 61 and m.job.parallelism.vpp > 1]
    assert len(deepseek) == 4
    assert all(any(a.startswith("pipeline layout E") for a in m.assumptions) for m in deepseek)


def test_torchtitan_fsdp2_runs_on_a100_are_within_the_target():
    report = run_validation(measurements=external_path("torchtitan_a100.csv"))
    errors = [abs(r.error) for r in report.rows]
    assert not report.skipped and len(errors) == 8 and {r.framework for r in report.rows} == {"torchtitan"}
    assert sum(errors) / len(errors) <= 0.10 and max(errors) <= 0.25


def test_torchtitan_grand_teton_h100_runs_use_their_power_limited_part_and_fit():
    """torchtitan's December 2024 H100 benchmarks ran on 500 W HBM2e parts: every row is predicted on the
    grand-teton-h100 preset and fits; its error stays at what docs/VALIDATION.md reports (the long-context CP rows are
    the worst, -25 to -29 %)."""
    path = external_path("torchtitan_h100.csv")
    report = run_validation(measurements=path)
    jobs = {m.id: m.job for m in load_table(path).rows}
    assert not report.skipped and len(report.rows) == 18 and all(r.fits for r in report.rows)
    assert {j.system.name for j in jobs.values()} == {"grand-teton-h100"}
    errors = [abs(r.error) for r in report.rows]
    assert sum(errors) / len(errors) <= 0.16 and max(errors) <= 0.30


def test_nemo_25_performance_summaries_are_predicted_within_the_target_and_fit():
    """NeMo 25.02 (B200) and 25.04 (GB200): every row predicted (Megatron-FSDP where the FSDP column is 1, the
    Mixtral 8x22B long-context row with CP 8), all fit; the mean error is within the issue's 10 % target."""
    path = external_path("nemo_25_02_04.csv")
    report = run_validation(measurements=path)
    errors = [abs(r.error) for r in report.rows]
    assert not report.skipped and len(errors) == 15 and all(r.fits for r in report.rows)
    assert {r.framework for r in report.rows} == {"nemo"}
    assert sum(errors) / len(errors) <= 0.10 and max(errors) <= 0.25
    fsdp = [m for m in load_table(path).rows if m.id == "ng2"]
    assert fsdp[0].job.training.zero_stage == 3


def test_megatron_moe_modelzoo_cross_node_deepep_runs_send_a_token_once_per_node():
    """Megatron-MoE-ModelZoo's Qwen3-235B with EP 32 across four H100 nodes and DeepEP: the flex dispatcher's
    deduplicated network traffic (trainsim.workload.routing) predicts them within 10 %; pricing the same rows with
    the all-to-all's traffic (a copy per expert) makes them 35 %+ too slow. Every row is predicted."""
    path = external_path("megatron_moe_modelzoo.csv")
    report = run_validation(measurements=path)
    assert not report.skipped and len(report.rows) == 5
    rows = {m.id: m for m in load_table(path).rows}
    cross = [r for r in report.rows if r.id in ("mz0", "mz1")]
    assert all(rows[r.id].job.training.moe_token_dispatcher == "flex" for r in cross)
    assert all(abs(r.error) <= 0.10 for r in cross)
    job = rows["mz0"].job
    plain = predict(job.replace(training=job.training.replace(moe_token_dispatcher="alltoall")))
    assert plain.iteration_time_s > 1.35 * rows["mz0"].measured_iter_s


def test_the_held_out_bias_table_pools_every_file_by_generation_arithmetic_and_kind():
    """The summary's rows add up to every held-out run, and its signed mean is the mean of the pooled errors."""
    from trainsim.validation.external import EXTERNAL_FILES, bias_lines

    pooled = []
    for name in EXTERNAL_FILES:
        path = external_path(name)
        jobs = {m.id: m.job for m in load_table(path).rows}
        pooled += [(jobs[r.id], r.error) for r in run_validation(measurements=path).rows]
    rows = [line for line in bias_lines(pooled) if line.startswith("| ") and not line.startswith("| generation")]
    assert sum(int(line.split("|")[4]) for line in rows) == len(pooled)
    hopper_fp8_dense = next(line for line in rows if line.startswith("| hopper | fp8 | dense"))
    errors = [e for job, e in pooled if job.system.gpu.generation == "hopper" and job.training.precision == "fp8"
              and not job.model.is_moe]
    assert f"{100 * sum(errors) / len(errors):+.1f}%" in hopper_fp8_dense
