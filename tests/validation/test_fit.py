"""The constant fit: an FP8 kernel scale that no row identifies follows the 16-bit one (not its prior)."""

from trainsim.validation.fit import fit_generation
from trainsim.validation.report import all_measurements


def test_unidentified_fp8_scale_follows_the_16_bit_scale():
    rows = [r for r in all_measurements() if r.source == "mlm24"][:2]  # bf16 Hopper rows, no FP8
    assert rows and all(r.job.training.precision != "fp8" for r in rows)
    fit = fit_generation(rows, "hopper", sweeps=1, iters=3).calibration
    assert fit.measured_fp8_kernel_scale == fit.measured_kernel_scale
    fp8 = [r for r in all_measurements() if r.source == "nemo2407"][:2]
    fitted = fit_generation(fp8, "hopper", names=("measured_fp8_kernel_scale",), sweeps=1, iters=3).calibration
    assert fitted.measured_fp8_kernel_scale != fitted.measured_kernel_scale  # identified by FP8 rows: fitted
