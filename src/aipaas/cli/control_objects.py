"""Object commands over the SDK: apply, get, describe, delete, cancel, logs, events, tokens."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from aipaas.api.registry import resolve_kind
from aipaas.cli import columns, queue_views
from aipaas.client import Client
from aipaas.errors import AipaasError, InvalidObject

T = TypeVar("T")
Tenant = Annotated[str | None, typer.Option("--tenant", "-t", help="Tenant (platform admins).")]
Output = Annotated[str, typer.Option("--output", "-o", help="table, json or yaml.")]
GetOutput = Annotated[
    str, typer.Option("--output", "-o", help="table, wide (queues: cpu and memory), json or yaml.")
]
ChunkSize = Annotated[
    int | None,
    typer.Option("--chunk-size", min=1, max=5000, help="Items per request (pages are followed)."),
]

tokens_app = typer.Typer(help="Bearer tokens.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    for name, function in (
        ("apply", apply),
        ("get", get),
        ("describe", describe),
        ("delete", delete),
        ("cancel", cancel),
        ("logs", logs),
        ("events", events),
        ("usage", usage),
    ):
        app.command(name)(function)
    app.add_typer(tokens_app, name="tokens")


@contextmanager
def _client() -> Iterator[Client]:
    """A client from the environment; any aipaas error ends the command with its message."""
    try:
        with Client.from_env() as client:
            yield client
    except AipaasError as err:
        print(f"error: {err.message}", file=sys.stderr)
        if isinstance(err, InvalidObject):
            for field in err.fields:
                print(f"  {field}", file=sys.stderr)
        raise typer.Exit(1) from err


def _split(kind: str, name: str | None) -> tuple[str, str | None]:
    """`job/hello` or `job hello`."""
    if "/" in kind and name is None:
        kind, _, name = kind.partition("/")
    return kind, name


def apply(
    file: Annotated[list[Path], typer.Option("--filename", "-f", help="YAML/JSON ('-': stdin).")],
) -> None:
    """Create or update the objects of one or more multi-document YAML files."""
    with _client() as client:
        for path in file:
            text = sys.stdin.read() if str(path) == "-" else _read(path)
            for item in client.apply(text):
                print(f"{item['kind'].lower()}/{item['name']} {item['action']}")


def get(
    kind: Annotated[str, typer.Argument(help="job, jobs, queue, tenant, user, node")],
    name: Annotated[str | None, typer.Argument()] = None,
    output: GetOutput = "table",
    tenant: Tenant = None,
    chunk_size: ChunkSize = None,
) -> None:
    """List objects of a kind, or show one."""
    kind, name = _split(kind, name)
    if output not in ("table", "wide", "json", "yaml"):
        print("error: --output must be table, wide, json or yaml", file=sys.stderr)
        raise typer.Exit(2)
    if _is_queue(kind) and output in ("table", "wide"):
        with _client() as client:
            if name:
                queues = [client.get(kind, name, tenant)]
            else:
                queues = client.list(kind, tenant, page_size=chunk_size)
        queue_views.print_queues(queues, wide=output == "wide")
        return
    wide = output == "wide"
    output = "table" if wide else output
    if kind.lower() in ("device", "devices"):
        with _client() as client:
            _print_devices(client.devices(page_size=chunk_size), output)
        return
    with _client() as client:
        if name:
            obj = client.get(kind, name, tenant)
            _print([obj], output, single=True, wide=wide)
        else:
            items = client.list(kind, tenant, page_size=chunk_size)
            _print(items, output, single=False, wide=wide)


def describe(
    kind: Annotated[str, typer.Argument()],
    name: Annotated[str | None, typer.Argument()] = None,
    tenant: Tenant = None,
) -> None:
    """An object in YAML, then its events."""
    kind, name = _split(kind, name)
    if not name:
        print("error: describe needs KIND NAME", file=sys.stderr)
        raise typer.Exit(2)
    with _client() as client:
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


def delete(
    kind: Annotated[str, typer.Argument()],
    name: Annotated[str | None, typer.Argument()] = None,
    tenant: Tenant = None,
) -> None:
    """Delete an object (a running job is cancelled first)."""
    kind, name = _split(kind, name)
    if not name:
        print("error: delete needs KIND NAME", file=sys.stderr)
        raise typer.Exit(2)
    with _client() as client:
        print(client.delete(kind, name, tenant))


def cancel(
    target: Annotated[str, typer.Argument(help="job/NAME, or NAME")],
    name: Annotated[str | None, typer.Argument()] = None,
    tenant: Tenant = None,
) -> None:
    """Cancel a job: its processes are stopped."""
    kind, job = _split(target, name)
    if job is None:
        kind, job = "job", kind
    if kind.lower() not in ("job", "jobs"):
        print("error: only jobs can be cancelled", file=sys.stderr)
        raise typer.Exit(2)
    with _client() as client:
        client.cancel(job, tenant)
        print(f"job {job} cancelling")


def logs(
    target: Annotated[str, typer.Argument(help="job/NAME, or NAME")],
    task: Annotated[str | None, typer.Option("--task", help="One task, e.g. worker-1.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until the job ends.")
    ] = False,
    tenant: Tenant = None,
    tail: Annotated[
        int | None, typer.Option("--tail", min=0, help="The last N lines of each task.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only tasks that wrote in this window: 30s, 10m, 2h, 1d."),
    ] = None,
    limit_bytes: Annotated[
        int | None, typer.Option("--limit-bytes", min=1, help="At most this many bytes.")
    ] = None,
) -> None:
    """Logs of every task of a job, each line prefixed with the task's name."""
    kind, _, job = target.partition("/")
    if not job:
        kind, job = "job", kind
    if kind.lower() not in ("job", "jobs"):
        print("error: logs are kept for jobs: use job/NAME", file=sys.stderr)
        raise typer.Exit(2)
    since_seconds = None
    if since is not None:
        since_seconds = duration_seconds(since)
        if since_seconds is None:
            print(f"error: --since {since!r}: use a duration such as 30s, 10m, 2h", file=sys.stderr)
            raise typer.Exit(2)
    with _client() as client:
        lines = client.logs(
            job,
            task=task,
            follow=follow,
            tenant=tenant,
            tail=tail,
            since_seconds=since_seconds,
            limit_bytes=limit_bytes,
        )
        for line in lines:
            print(line, flush=follow)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int | None:
    """``30s``, ``10m``, ``2h``, ``1d`` or ``1h30m`` (a bare number is seconds), in whole
    seconds; None when it is not a positive duration."""
    match = re.fullmatch(r"(?:(\d+)([smhd]))+|(\d+)", text.strip())
    if match is None:
        return None
    if match.group(3) is not None:
        total = int(match.group(3))
    else:
        total = sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", text))
    return total if total > 0 else None


def events(
    kind: Annotated[str | None, typer.Argument()] = None,
    name: Annotated[str | None, typer.Argument()] = None,
    tenant: Tenant = None,
    output: Output = "table",
    chunk_size: ChunkSize = None,
) -> None:
    """What happened, oldest first; all of a tenant's, or one object's."""
    if kind:
        kind, name = _split(kind, name)
    with _client() as client:
        items = client.events(kind, name, tenant, page_size=chunk_size)
    if output == "json":
        print(json.dumps(items, indent=2))
        return
    table = Table(box=None)
    for column in ("TIME", "OBJECT", "TYPE", "REASON", "MESSAGE"):
        table.add_column(column)
    for event in items:
        table.add_row(
            event["timestamp"],
            f"{event['kind'].lower()}/{event['name']}",
            event["type"],
            event["reason"],
            event["message"],
        )
    Console(width=200).print(table)


def usage(tenant: Tenant = None, output: Output = "table") -> None:
    """GPU-, CPU- and memory-hours by tenant, queue, user and GPU model (the usage ledger)."""
    with _client() as client:
        items = client.usage(tenant)
    if output == "json":
        print(json.dumps(items, indent=2))
        return
    table = Table(box=None)
    columns = ("TENANT", "QUEUE", "USER", "GPU MODEL", "GPU-HOURS", "CPU-HOURS", "MEM GIB-HOURS")
    for column in (*columns, "TASKS"):
        table.add_column(column)
    for row in items:
        table.add_row(
            row["tenant"],
            row["queue"],
            row["user"],
            row["gpuModel"] or "-",
            f"{row['gpuHours']:.3f}",
            f"{row['cpuHours']:.3f}",
            f"{row.get('memoryGiBHours', 0):.3f}",
            str(row["tasks"]),
        )
    Console(width=200).print(table)


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
    with _client() as client:
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
    with _client() as client:
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
    with _client() as client:
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


def _is_queue(kind: str) -> bool:
    try:
        return resolve_kind(kind) == "Queue"
    except AipaasError:
        return False  # an unknown kind: the server's answer names it


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        print(f"error: cannot read {path}: {err.strerror}", file=sys.stderr)
        raise typer.Exit(1) from err


def _print_devices(rows: list[dict[str, Any]], output: str) -> None:
    if output != "table":
        _print(rows, output, single=False)
        return
    table = Table(box=None)
    headers = ("NODE", "DEVICE", "MODEL", "NVLINK", "NUMA", "PCIE ROOT", "MEMORY", "STATE")
    for header in (*headers, "HOLDERS"):
        table.add_column(header)
    for row in rows:
        attributes = row["attributes"]

        def attribute(name: str, attributes: dict[str, Any] = attributes) -> str:
            for key, value in attributes.items():
                if key == name or key.endswith("/" + name):
                    return str(value)
            return ""

        table.add_row(
            row["node"],
            row["device"],
            attribute("model") or attribute("productName"),
            attribute("nvlinkDomain"),
            attribute("numaNode"),
            attribute("pcieRoot"),
            row["capacity"].get("memory")
            or next((v for k, v in row["capacity"].items() if k.endswith("/memory")), ""),
            row["state"],
            ", ".join(row["holders"]) or "-",
        )
    Console(width=200).print(table)


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


def _print(items: list[dict[str, Any]], output: str, *, single: bool, wide: bool = False) -> None:
    if output == "json":
        print(json.dumps(items[0] if single else items, indent=2))
        return
    if output == "yaml":
        print(yaml.safe_dump(items[0] if single else items, sort_keys=False).rstrip())
        return
    table = Table(box=None)
    shown = columns.columns_for(items[0]["kind"] if items else "", wide=wide)
    for column in shown:
        table.add_column(column.header)
    for item in items:
        table.add_row(*columns.row(shown, item))
    Console(width=240 if wide else 200).print(table)
