"""The `aipaas` command: one typer app; each domain adds its commands through `register`.

Exit codes are cli/failure.py's; nothing a command raises reaches the user as a traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from aipaas import __version__
from aipaas.cli import allocate, control, datasets, finops, pools, services, simulate
from aipaas.cli.failure import EXIT_GENERIC

app = typer.Typer(
    name="aipaas",
    help="aipaas: a shared, multi-tenant service for AI work on a pool of GPU machines.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def version() -> str:
    from importlib import metadata  # about 0.15 s: only when asked

    try:
        return metadata.version("aipaas")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"aipaas {version()}")
        raise typer.Exit(0)


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """aipaas: a shared, multi-tenant service for AI work on a pool of GPU machines.

    Exit codes: 0 ok, 1 failed, 2 usage or invalid, 3 not found, 4 unauthorised or
    forbidden, 5 server unreachable, 6 timed out.
    """


for module in (simulate, control, allocate, pools, services, finops, datasets):
    module.register(app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # a bug or an odd environment: one line, no traceback
        first = (str(err).strip().splitlines() or [""])[0]
        print(f"error: {type(err).__name__}: {first}", file=sys.stderr)
        sys.exit(EXIT_GENERIC)
