"""`aipaas logs` (-f waits for the job to start and says why it waits) and `aipaas events`
(-f follows the API's event stream)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from aipaas.cli import complete, selectors
from aipaas.cli.control_get import Tenant, duration_seconds
from aipaas.cli.failure import EXIT_NOT_FOUND, EXIT_TIMEOUT, client, fail
from aipaas.client import Client


def logs(
    target: Annotated[str, typer.Argument(help="job/NAME, or NAME", autocompletion=complete.jobs)],
    task: Annotated[str | None, typer.Option("--task", help="One task, e.g. worker-1.")] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Wait for the job to start, then stream until it ends."
        ),
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
    start_timeout: Annotated[
        str | None,
        typer.Option("--start-timeout", help="With -f: give up waiting for the start (exit 6)."),
    ] = None,
) -> None:
    """Logs of every task of a job, each line prefixed with the task's name."""
    kind, _, job = target.partition("/")
    if not job:
        kind, job = "job", kind
    if kind.lower() not in ("job", "jobs"):
        fail("logs are kept for jobs: use job/NAME")
    since_seconds = None
    if since is not None:
        since_seconds = duration_seconds(since)
        if since_seconds is None:
            fail(f"--since {since!r}: use a duration such as 30s, 10m, 2h")
    waiting_limit = None
    if start_timeout is not None:
        waiting_limit = duration_seconds(start_timeout)
        if waiting_limit is None:
            fail(f"--start-timeout {start_timeout!r}: use a duration such as 30s, 10m")
    with client() as api:
        current = api.get("job", job, tenant)
        pending = selectors.phase_of(current) == "Pending"
        if pending and follow:
            _wait_for_start(api, job, tenant, current, waiting_limit)
        lines = api.logs(
            job,
            task=task,
            follow=follow,
            tenant=tenant,
            tail=tail,
            since_seconds=since_seconds,
            limit_bytes=limit_bytes,
        )
        printed = 0
        for line in lines:
            printed += 1
            print(line, flush=follow)
        if pending and not follow and not printed:
            print(f"job/{job} has not started: {why_pending(current)}", file=sys.stderr)


def why_pending(job: dict[str, Any]) -> str:
    """The job's pending reason as its status says it (the scheduler writes why it waits)."""
    status = job.get("status") or {}
    reason = status.get("reason") or "Pending"
    message = status.get("message")
    return f"{reason}: {message}" if message else str(reason)


def _wait_for_start(
    api: Client, job: str, tenant: str | None, current: dict[str, Any], limit: int | None
) -> None:
    """Say why the job waits, again whenever the reason changes, until it is no longer
    Pending."""
    said = why_pending(current)
    print(f"waiting for job/{job} to start: {said}", file=sys.stderr, flush=True)
    try:
        for change in api.watch("job", job, tenant, timeout=limit):
            obj = change["object"]
            if change["type"] == "DELETED":
                fail(f"job/{job} was deleted before it started", EXIT_NOT_FOUND)
            if selectors.phase_of(obj) != "Pending":
                return
            reason = why_pending(obj)
            if reason != said:
                said = reason
                print(f"still waiting for job/{job}: {said}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    fail(f"job/{job} did not start within {limit}s: {said}", EXIT_TIMEOUT)


def events(
    kind: Annotated[str | None, typer.Argument(autocompletion=complete.kinds)] = None,
    name: Annotated[str | None, typer.Argument(autocompletion=complete.names)] = None,
    tenant: Tenant = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
    follow: Annotated[
        bool, typer.Option("--follow", "-f", "--watch", "-w", help="Then print new ones.")
    ] = False,
    chunk_size: Annotated[
        int | None,
        typer.Option(
            "--chunk-size", min=1, max=5000, help="Items per request (pages are followed)."
        ),
    ] = None,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="With -f: stop following after 30s, 10m...")
    ] = None,
) -> None:
    """What happened, oldest first: a tenant's events, or one object's; -f follows."""
    if output not in ("table", "json"):
        fail("--output must be table or json")
    if kind and "/" in kind and name is None:
        kind, _, name = kind.partition("/")
    if follow:
        seconds = None if timeout is None else duration_seconds(timeout)
        if timeout is not None and seconds is None:
            fail(f"--timeout {timeout!r}: use a duration such as 30s, 10m")
        _follow_events(kind, name, tenant, output, seconds)
        return
    with client() as api:
        items = api.events(kind, name, tenant, page_size=chunk_size)
    if output == "json":
        print(json.dumps(items, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

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


def _follow_events(
    kind: str | None, name: str | None, tenant: str | None, output: str, timeout: float | None
) -> None:
    with client() as api:
        if kind and name:
            api.get(kind, name, tenant)  # a name that does not exist is an error, as without -f
        if output == "table":
            print(f"{'TIME':<27} {'OBJECT':<32} {'TYPE':<7} {'REASON':<18} MESSAGE", flush=True)
        try:
            for event in api.follow_events(kind, name, tenant, timeout=timeout):
                if output == "json":
                    print(json.dumps(event), flush=True)
                    continue
                what = f"{event['kind'].lower()}/{event['name']}"
                print(
                    f"{event['timestamp']:<27} {what:<32} {event['type']:<7} "
                    f"{event['reason']:<18} {event['message']}",
                    flush=True,
                )
        except KeyboardInterrupt:
            return
