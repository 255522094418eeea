import math

import pytest

from trainsim.validation.measurements import load_measurements
from trainsim.validation.report import run_validation


def test_every_published_row_becomes_a_valid_job():
    rows = load_measurements()
    assert len(rows) == 39
    assert {r.source for r in rows} == {"sc21", "kort", "mlm24", "nemo2407"}
    for r in rows:
        assert r.job.world_size == int(r.job.num_gpus)


@pytest.mark.parametrize(("rid", "derived"), [("sc21_t1_1.7B", 3.53), ("sc21_t1_1008B", 102.63),
                                              ("mlm24_h100_weak_1.7B", 0.45), ("mlm24_h100_weak_462B", 12.72),
                                              ("nemo2407_h100_GPT3-175B_128gpu", 5.721)])
def test_measured_times_follow_the_dataset_readme(rid, derived):
    row = next(r for r in load_measurements() if r.id == rid)
    assert row.measured_iter_s == pytest.approx(derived, rel=0.01)


def test_packaged_table_is_the_shared_one(shared):
    from importlib import resources

    packaged = (resources.files("trainsim") / "data" / "published" / "measurements.csv").read_text()
    assert packaged == (shared / "data" / "published" / "measurements.csv").read_text()


def test_calibrated_model_meets_the_accuracy_target():
    report = run_validation(refit=False, held_out=False)
    assert report.mape() <= 0.10
    for src in report.sources():
        assert report.mape(src) <= 0.10, src
    # every row but one is within 25 % (the exception is documented in docs/VALIDATION.md)
    assert sum(1 for r in report.rows if abs(r.error) > 0.25) <= 1
    assert all(math.isfinite(r.predicted_s) for r in report.rows)
    assert report.unfit() == []  # every measured run ran, so none may be predicted out of memory
