"""Output files without lost work: check a path before computing, write it atomically.

Every command that writes a file (``--csv``, ``--plot``, ``--trace``, ``--html``, ``--out`` ...) calls
:func:`check_output_path` for each path *before* any computation, so a typo in a directory costs nothing but a
one-line error, and writes through :func:`atomic_path` (or the ``write_*_atomic`` shortcuts), so a failure never
leaves a half-written file: the data go to a temporary file in the same directory, renamed over the target only
when complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trainsim.errors import TrainsimError


def check_output_path(path: str | os.PathLike[str], field: str, *, directory: bool = False) -> Path:
    """Validate an output path before computing; return it as a :class:`Path`.

    ``directory=True`` is for options naming an output folder (created if its parent exists). Raises
    :class:`TrainsimError` naming ``field`` when the parent directory is missing, the path is a directory where a
    file is expected (or a file where a directory is), or the location is not writable.
    """
    p = Path(path).expanduser()
    if str(path) == "":
        raise TrainsimError(field, "the output path is empty", "give a file name")
    if directory:
        if p.exists() and not p.is_dir():
            raise TrainsimError(field, f"'{p}' exists and is not a directory", "give a directory path")
        parent = p if p.exists() else p.parent
    else:
        if p.is_dir():
            raise TrainsimError(field, f"'{p}' is a directory, not a file", "give a file name inside it")
        parent = p.parent
    parent = parent if str(parent) else Path(".")
    if not parent.exists():
        raise TrainsimError(field, f"directory '{parent}' does not exist", "create it first or choose another path")
    if not parent.is_dir():
        raise TrainsimError(field, f"'{parent}' is not a directory", "choose a path inside an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TrainsimError(field, f"directory '{parent}' is not writable", "choose a writable location")
    if not directory and p.exists() and not os.access(p, os.W_OK):
        raise TrainsimError(field, f"'{p}' exists and is not writable", "choose another file name")
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``, on failure remove it.

    Writers that take a file name (pandas, pyarrow, matplotlib) write to the yielded path. The suffix is kept so
    that libraries choosing a format by extension still work. The file gets the permissions a plain ``open()``
    would give it (an existing file's mode, else ``0o666`` less the umask), not ``mkstemp``'s private ``0o600``.
    """
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix or ".tmp",
                                    dir=str(target.parent) if str(target.parent) else ".")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _mode_for(target: Path) -> int:
    """The permissions of ``target`` if it exists, else those of a new file under the current umask."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text_atomic(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write text to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write bytes to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
