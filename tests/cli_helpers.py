"""Helpers shared by the CLI tests: run ``trainsim`` in process and check one-line errors."""

from __future__ import annotations

from trainsim.cli import main


def run(args: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run ``trainsim ARGS`` in this process; return (exit code, stdout, stderr)."""
    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def check_one_line_error(code: int, err: str, *words: str) -> None:
    """Assert a user error: exit code 2, one line on stderr starting with ``error:``, no traceback, all ``words``."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], lines[0]


def run_plain(args: list[str]) -> tuple[int, str, str]:
    """Run ``trainsim ARGS`` in this process capturing stdout/stderr without pytest's capsys (for hypothesis)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()
