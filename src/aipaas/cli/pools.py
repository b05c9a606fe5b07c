"""Node pool commands: `aipaas get|describe nodepools` (columns registered here) and
`aipaas nodepool scale NAME --size N` (or `--auto` to hand the size back to the autoscaler).

Scaling writes ``spec.size`` with a replace of the version read, so that two admins scaling at
once do not overwrite each other silently (the second gets a conflict and tries again).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
import yaml

from aipaas.cli import columns
from aipaas.cli.columns import Column, meta
from aipaas.client import Client
from aipaas.errors import AipaasError, Conflict, InvalidObject

pools_app = typer.Typer(help="Node pools (platform admins write them).", no_args_is_help=True)


def _status(key: str) -> columns.Getter:
    return lambda o: (o.get("status") or {}).get(key, 0)


def _gpus(pool: dict[str, Any]) -> str:
    gpus = pool["spec"]["node"].get("gpus") or {}
    return f"{gpus.get('count', 0)}x{gpus.get('model', '')}" if gpus.get("count") else "0"


def register(app: typer.Typer) -> None:
    columns.register(
        "NodePool",
        [
            Column("NAME", meta("name")),
            Column("BACKEND", lambda o: o["spec"]["backend"]),
            Column("GPUS/NODE", _gpus),
            Column("MIN", lambda o: o["spec"].get("minSize", 0)),
            Column("MAX", lambda o: o["spec"]["maxSize"]),
            Column("SIZE", lambda o: o["spec"].get("size", "auto")),
            Column("READY", _status("ready")),
            Column("PROVISIONING", _status("provisioning")),
            Column("DRAINING", _status("draining")),
            Column("$/H", lambda o: o["spec"].get("pricePerHour", 0), wide_only=True),
            Column(
                "LENDING",
                lambda o: (o["spec"].get("lending") or {}).get("enabled", False),
                wide_only=True,
            ),
        ],
    )
    pools_app.command("scale")(scale)
    app.add_typer(pools_app, name="nodepool")


def scale(
    name: Annotated[str, typer.Argument(help="The pool.")],
    size: Annotated[int | None, typer.Option("--size", min=0, help="Nodes to hold.")] = None,
    auto: Annotated[
        bool, typer.Option("--auto", help="Let the autoscaler decide again (within min/max).")
    ] = False,
) -> None:
    """Set a pool's size (its nodes are made, or drained and removed once empty)."""
    if (size is None) == (not auto):
        print("error: give --size N or --auto", file=sys.stderr)
        raise typer.Exit(2)
    try:
        with Client.from_env() as client:
            for attempt in range(5):
                pool = client.get("NodePool", name)
                pool.pop("status", None)
                if auto:
                    pool["spec"].pop("size", None)
                else:
                    pool["spec"]["size"] = size
                try:
                    client.replace(yaml.safe_dump(pool))
                    break
                except Conflict:
                    if attempt == 4:
                        raise
    except AipaasError as err:
        print(f"error: {err.message}", file=sys.stderr)
        if isinstance(err, InvalidObject):
            for field in err.fields:
                print(f"  {field}", file=sys.stderr)
        raise typer.Exit(1) from err
    print(f"nodepool/{name} scaled to {'auto' if auto else size}")
