"""How a CLI command fails: one message on standard error, no traceback, and an exit code
that says what kind of failure it was, so that scripts can tell them apart:

    0  success
    1  any other failure (a conflict, a job that ended other than waited for, a server error)
    2  usage: a bad option or argument, or an object the server found invalid
    3  not found: the object, its kind, or its tenant
    4  unauthorised or forbidden: no token, a wrong one, or a role that may not do it
    5  unreachable: no server answers at the URL (or it answered 503)
    6  timeout: `aipaas wait` or `logs -f` gave up
    7  `aipaas up` or `aipaas server` cannot start: the port is taken (or not this machine's),
       or an `aipaas up` already serves the data directory (cli/data_dir_lock.py)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

from aipaas.client import Client, WaitTimeout
from aipaas.errors import (
    AipaasError,
    ClientError,
    Forbidden,
    InvalidObject,
    NotFound,
    PayloadTooLarge,
    Unauthenticated,
    Unavailable,
)

EXIT_GENERIC = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNAUTHORISED = 4
EXIT_UNREACHABLE = 5
EXIT_TIMEOUT = 6
EXIT_PORT_TAKEN = 7


def exit_code(err: AipaasError) -> int:
    if isinstance(err, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(err, Unauthenticated | Forbidden):
        return EXIT_UNAUTHORISED
    if isinstance(err, Unavailable):
        return EXIT_UNREACHABLE
    if isinstance(err, WaitTimeout):
        return EXIT_TIMEOUT
    if isinstance(err, InvalidObject | PayloadTooLarge) or type(err) is ClientError:
        return EXIT_USAGE
    return EXIT_GENERIC


def report(err: AipaasError) -> None:
    """The error's message (and the fields an invalid object got wrong) on standard error."""
    print(f"error: {err.message}", file=sys.stderr)
    if isinstance(err, InvalidObject):
        for field in err.fields:
            if str(field) not in err.message:  # said once: the message often lists them
                print(f"  {field}", file=sys.stderr)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


@contextmanager
def handled() -> Iterator[None]:
    """Any aipaas error inside ends the command with its message and its exit code."""
    try:
        yield
    except AipaasError as err:
        report(err)
        raise typer.Exit(exit_code(err)) from err


@contextmanager
def client() -> Iterator[Client]:
    """A client from the environment; any aipaas error ends the command as ``handled``."""
    with handled(), Client.from_env() as opened:
        yield opened
