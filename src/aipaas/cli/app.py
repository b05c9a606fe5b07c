"""The `aipaas` command: one typer app; each domain adds its commands through `register`.

Exit codes are cli/failure.py's; nothing a command raises reaches the user as a traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError

from aipaas import __version__
from aipaas.cli import allocate, control, datasets, finops, pools, run, services, simulate
from aipaas.cli import exec as exec_command
from aipaas.cli.failure import EXIT_GENERIC, EXIT_USAGE

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
run.register(app)  # aipaas run: a job from the command line (cli/run.py)
exec_command.register(app)  # aipaas exec: a command in a running task (cli/exec.py)


def main() -> None:
    try:
        # Not standalone: click's usage errors come back here, said in one line below, rather
        # than as typer's boxed report of four or five.
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as err:  # `aipaas` or `aipaas get` alone: the help, as asked
        print(err.ctx.get_help() if err.ctx is not None else err.format_message())
        sys.exit(EXIT_USAGE)
    except UsageError as err:
        print(f"error: {usage_line(err)}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except typer.TyperException as err:  # a bad file argument, and the like
        print(f"error: {' '.join(err.format_message().split())}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(EXIT_GENERIC)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # a bug or an odd environment: one line, no traceback
        first = (str(err).strip().splitlines() or [""])[0]
        print(f"error: {type(err).__name__}: {first}", file=sys.stderr)
        sys.exit(EXIT_GENERIC)
    sys.exit(code if isinstance(code, int) else 0)


def usage_line(err: UsageError) -> str:
    """A usage error in one line: what is wrong, and where the help is."""
    message = " ".join(err.format_message().split())
    command = err.ctx.command_path if err.ctx is not None else "aipaas"
    return f"{message} (see {command} --help)"
