"""Object commands over the SDK: apply, describe, tokens (usage is cli/finops.py's); `get` is
control_get.py's, the commands that act on jobs by name or selector control_jobs.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from aipaas.cli import complete, control_get, control_jobs, control_streams, failure, queue_views
from aipaas.cli.control_get import Tenant
from aipaas.cli.control_jobs import duration_seconds
from aipaas.errors import InvalidObject

Output = Annotated[str, typer.Option("--output", "-o", help="table, json or yaml.")]

tokens_app = typer.Typer(help="Bearer tokens.", no_args_is_help=True)


__all__ = ["duration_seconds", "register"]


def register(app: typer.Typer) -> None:
    for name, function in (
        ("apply", apply),
        ("get", control_get.get),
        ("describe", describe),
        ("delete", control_jobs.delete),
        ("cancel", control_jobs.cancel),
        ("rerun", control_jobs.rerun),
        ("wait", control_jobs.wait),
        ("logs", control_streams.logs),
        ("events", control_streams.events),
    ):
        app.command(name)(function)
    app.add_typer(tokens_app, name="tokens")


def _split(kind: str, name: str | None) -> tuple[str, str | None]:
    """`job/hello` or `job hello`."""
    if "/" in kind and name is None:
        kind, _, name = kind.partition("/")
    return kind, name


def apply(
    file: Annotated[
        list[Path],
        typer.Option(
            "--filename", "-f", help="YAML/JSON file, a directory of them, or '-' (stdin)."
        ),
    ],
) -> None:
    """Create or update the objects of one or more multi-document YAML files."""
    paths = [p for path in file for p in _files(path)]
    texts = [(path, sys.stdin.read() if str(path) == "-" else _read(path)) for path in paths]
    with failure.client() as client:
        for path, text in texts:
            try:
                applied = client.apply(text)
            except InvalidObject as err:  # which file, when there may be several
                if str(path) != "-":
                    err.message = f"{path}: {err.message}"
                raise
            for item in applied:
                print(f"{item['kind'].lower()}/{item['name']} {item['action']}")


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _files(path: Path) -> list[Path]:
    """A directory's manifests (in name order, not recursing), or the path itself."""
    if str(path) != "-" and path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        if not found:
            failure.fail(f"{path}: no .yaml, .yml or .json files in it")
        return found
    return [path]


def describe(
    kind: Annotated[str, typer.Argument(autocompletion=complete.kinds)],
    name: Annotated[str | None, typer.Argument(autocompletion=complete.names)] = None,
    tenant: Tenant = None,
) -> None:
    """An object in YAML, then its events."""
    kind, name = _split(kind, name)
    if not name:
        print("error: describe needs KIND NAME", file=sys.stderr)
        raise typer.Exit(2)
    with failure.client() as client:
        obj = client.get(kind, name, tenant)
        if obj.get("kind") == "Queue":
            owner = obj["metadata"].get("tenant") or tenant
            lines = queue_views.describe_lines(
                obj, client.list("queue", owner), client.list("job", owner)
            )
            print("\n".join(lines))
        else:
            print(yaml.safe_dump(obj, sort_keys=False).rstrip())
        events = client.events(kind, name, obj["metadata"].get("tenant") or tenant)
        if obj.get("kind") == "ResourceClaim":
            _print_claim_state(obj, events)
        print("events:")
        for event in events:
            print(
                f"  {event['timestamp']}  {event['type']:<7} {event['reason']:<16} "
                f"{event['message']}"
            )


TOKEN_COLUMNS = ("ID", "NAME", "USER", "TENANT", "STATE", "CREATED", "EXPIRES", "LAST USED")


@tokens_app.command("create")
def create_token(
    user: Annotated[str, typer.Argument(help="The user the token acts as.")],
    tenant: Tenant = None,
    name: Annotated[str | None, typer.Option("--name", help="What it is for (ci, laptop).")] = None,
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Lifetime: 3600, 90s, 30m, 12h, 90d.")
    ] = None,
    expires_at: Annotated[
        str | None, typer.Option("--expires-at", help="Expiry, RFC 3339 with a zone.")
    ] = None,
    output: Annotated[
        str, typer.Option("--output", "-o", help="token (the secret only) or json.")
    ] = "token",
) -> None:
    """Create a token for USER and print it (only it, once) on standard output."""
    if output not in ("token", "json"):
        print("error: --output must be token or json", file=sys.stderr)
        raise typer.Exit(2)
    with failure.client() as client:
        answer = client.create_token(
            user, tenant, name=name, expires_in=expires_in, expires_at=expires_at
        )
    print(json.dumps(answer, indent=2) if output == "json" else answer["token"])


@tokens_app.command("list")
def list_tokens(tenant: Tenant = None, output: Output = "table") -> None:
    """Tokens you may see: your own; a tenant admin its tenant's; a platform admin all."""
    if output not in ("table", "json"):
        print("error: --output must be table or json", file=sys.stderr)
        raise typer.Exit(2)
    with failure.client() as client:
        items = client.list_tokens(tenant)
    if output == "json":
        print(json.dumps(items, indent=2))
        return
    table = Table(box=None)
    for column in TOKEN_COLUMNS:
        table.add_column(column)
    for token in items:
        table.add_row(*_token_row(token))
    Console(width=200).print(table)


@tokens_app.command("revoke")
def revoke_token(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (tok_...).")],
    output: Output = "table",
) -> None:
    """Revoke the token ID: it stops working at once (within seconds on other servers)."""
    with failure.client() as client:
        answer = client.revoke_token(token_id)
    if output == "json":
        print(json.dumps(answer, indent=2))
        return
    print(f"token {answer['id']} revoked")


def _token_row(token: dict[str, Any]) -> tuple[str, ...]:
    return (
        token["id"],
        token["name"] or "-",
        token["user"],
        token["tenant"] or "-",
        token["state"],
        token["createdAt"],
        token.get("expiresAt") or "never",
        token.get("lastUsedAt") or "never",
    )


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        failure.fail(f"cannot read {path}: {err.strerror}")


def _print_claim_state(obj: dict[str, Any], events: list[dict[str, Any]]) -> None:
    allocation = (obj.get("status") or {}).get("allocation")
    if allocation:
        print("allocation:")
        for result in allocation.get("devices", {}).get("results", []):
            print(
                f"  {result['request']}: {result['device']} "
                f"(driver {result['driver']}, pool {result['pool']})"
            )
        return
    waiting = [e for e in events if e.get("reason") == "Unschedulable"]
    reason = waiting[-1]["message"] if waiting else "not yet used by a task"
    print(f"waiting: {reason}")
