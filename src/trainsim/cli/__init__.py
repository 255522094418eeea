"""Command-line interface: ``trainsim <command>``.

Each command lives in its own module of this package and registers itself on :data:`app`. Heavy imports happen inside
the command functions so that start-up stays fast. User errors (:class:`~trainsim.errors.TrainsimError` and click usage
errors) are printed on one line to stderr with exit code 2 and no traceback.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import typer

from trainsim.errors import TrainsimError, TrainsimWarning

app = typer.Typer(
    name="trainsim",
    help="Predict and explain the performance of distributed LLM training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)



def _version(value: bool) -> None:
    if value:
        from trainsim import __version__

        print(f"trainsim {__version__}")
        raise typer.Exit()


@app.callback()
def _group(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Predict and explain the performance of distributed LLM training."""


# Command modules, imported for their registration side effect. One line per command.
_COMMAND_MODULES: tuple[str, ...] = (
    "trainsim.cli.predict_cmd",
    "trainsim.cli.presets_cmd",
    "trainsim.cli.validate_cmd",
    "trainsim.cli.whatif_cmd",
    "trainsim.cli.search_cmd",
    "trainsim.cli.plan_cmd",
    "trainsim.cli.profile_cmd",
    "trainsim.cli.cluster_cmd",
)

for _name in _COMMAND_MODULES:
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError as _exc:  # a command whose module is not written yet
        if _exc.name != _name:
            raise


def _format_warning(message, category, filename, lineno, line=None):  # type: ignore[no-untyped-def]
    return f"warning: {message}\n"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``trainsim`` console script."""
    warnings.formatwarning = _format_warning
    warnings.simplefilter("always", TrainsimWarning)
    try:
        rv = app(args=argv, standalone_mode=False)
    except TrainsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # click's (vendored or not) usage errors, Exit and Abort, by duck typing
        kind = type(exc).__name__
        if kind == "Exit":
            sys.exit(getattr(exc, "exit_code", 0))
        if kind == "Abort":
            print("aborted", file=sys.stderr)
            sys.exit(130)
        format_message = getattr(exc, "format_message", None)
        if format_message is not None and hasattr(exc, "exit_code"):
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            message = " ".join(str(format_message()).split())
            print(f"error: {message}{hint}", file=sys.stderr)
            sys.exit(2)
        raise
    if isinstance(rv, int) and rv:
        sys.exit(rv)
