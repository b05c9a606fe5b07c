"""`aipaas allocate --dry-run -f FILE -o json`: run the device allocator with no server.

FILE is a multi-document YAML of DeviceClasses, ResourceSlices and ResourceClaims (the claims
of one pod; claims with status.allocation are allocations that already exist); several -f are
read as one. The answer is printed; the exit code is 0 whether or not the claims fit, and 2 for
invalid input, whose error names the object, the field and the problem.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml

from aipaas.api.devices import load_device_documents
from aipaas.api.yaml_errors import yaml_error_line
from aipaas.devices.inventory import InventoryError
from aipaas.devices.whatif import what_if
from aipaas.errors import InvalidObject


def register(app: typer.Typer) -> None:
    """Add `aipaas allocate` to the app."""
    app.command("allocate")(allocate)


def allocate(
    files: Annotated[
        list[str],
        typer.Option(
            "-f",
            "--filename",
            help="YAML file of classes, slices and claims; - for stdin; repeat -f for several",
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Allocate in memory only (the only mode without a server)"),
    ] = False,
    output: Annotated[str, typer.Option("-o", "--output", help="json, yaml or text")] = "text",
    first_fit: Annotated[
        bool,
        typer.Option(
            "--first-fit", help="Stop at the first node that fits (default: best topology score)"
        ),
    ] = False,
) -> None:
    """What-if: would these claims fit, on which node, with which devices - or why not."""
    if not dry_run:
        _fail("only --dry-run is supported here; a server allocates claims when it schedules pods")
    if output not in ("json", "yaml", "text"):
        _fail(f"-o: expected json, yaml or text, got {output!r}")
    if files.count("-") > 1:
        _fail("-f -: standard input can be read once")
    objects = []
    for file in files:
        source = "<stdin>" if file == "-" else file
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        except OSError as err:
            _fail(f"{file}: cannot read: {err.strerror or err}")
        try:
            objects.extend(load_device_documents(text, source=source))
        except InvalidObject as err:
            cause = err.__cause__
            if isinstance(cause, yaml.YAMLError):  # PyYAML's four lines, said in one
                _fail(f"{source}: not valid YAML: {yaml_error_line(cause)}")
            _fail(str(err))
    try:
        answer = what_if(objects, best=not first_fit)
    except InvalidObject as err:
        _fail(str(err))
    except InventoryError as err:
        _fail(f"{', '.join(files)}: {err}")
    _print(answer, output)


def _print(answer: dict[str, Any], output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(answer, indent=2))
    elif output == "yaml":
        typer.echo(yaml.safe_dump(answer, sort_keys=False), nl=False)
    elif answer["fits"]:
        typer.echo(f"fits on node {answer['node']}")
        for claim, rows in answer["allocations"].items():
            for row in rows:
                share = ""
                if row["consumedCapacity"]:
                    share = (
                        " ("
                        + ", ".join(f"{k}={v}" for k, v in row["consumedCapacity"].items())
                        + ")"
                    )
                typer.echo(f"  {claim}/{row['request']}: {row['pool']}/{row['device']}{share}")
    else:
        typer.echo("does not fit:")
        for reason in answer["reasons"]:
            typer.echo(f"  {reason}")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
