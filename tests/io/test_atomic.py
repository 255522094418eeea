"""Output paths are checked before computing and written atomically."""

from __future__ import annotations

import os

import pytest

from trainsim.errors import TrainsimError
from trainsim.io.atomic import atomic_path, check_output_path, write_text_atomic


def test_missing_directory_is_one_error(tmp_path):
    with pytest.raises(TrainsimError, match=r"--csv: directory .* does not exist"):
        check_output_path(tmp_path / "nope" / "out.csv", "--csv")


def test_directory_given_as_file(tmp_path):
    with pytest.raises(TrainsimError, match="is a directory"):
        check_output_path(tmp_path, "--trace")


def test_file_given_as_directory(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(TrainsimError, match="not a directory"):
        check_output_path(f, "--out", directory=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    with pytest.raises(TrainsimError, match="not writable"):
        check_output_path(d / "x.csv", "--csv")


def test_valid_paths_pass(tmp_path):
    assert check_output_path(tmp_path / "a.csv", "--csv") == tmp_path / "a.csv"
    assert check_output_path(tmp_path / "newdir", "--out", directory=True) == tmp_path / "newdir"


def test_failure_keeps_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_write_text_atomic(tmp_path):
    target = tmp_path / "r.txt"
    write_text_atomic(target, "done")
    assert target.read_text() == "done"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


def test_new_files_get_the_usual_permissions(tmp_path):
    import os

    from trainsim.io.atomic import write_text_atomic

    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "report.html", "x")
        assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o644  # shareable, like open() makes it
        (tmp_path / "report.html").chmod(0o600)
        write_text_atomic(tmp_path / "report.html", "y")
        assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o600  # an existing file keeps its mode
    finally:
        os.umask(old)
