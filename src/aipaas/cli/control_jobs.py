"""Commands that act on jobs (and other objects) by name or by selector: delete, cancel,
rerun, wait (logs and events: control_streams.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from aipaas.cli import complete, selectors
from aipaas.cli.control_get import Phase, Queue, Selector, Tenant, duration_seconds
from aipaas.cli.failure import (
    EXIT_NOT_FOUND,
    EXIT_TIMEOUT,
    client,
    exit_code,
    fail,
    handled,
    report,
)
from aipaas.client import Client, WaitTimeout
from aipaas.client_streams import condition
from aipaas.errors import AipaasError

Targets = Annotated[
    list[str] | None,
    typer.Argument(help="job/NAME..., or KIND NAME...", autocompletion=complete.targets),
]
All = Annotated[bool, typer.Option("--all", help="Every one of the kind (in the tenant).")]
FINISHED = ("Succeeded", "Failed", "Cancelled")


def targets_of(args: list[str], default_kind: str | None) -> tuple[str, list[str]]:
    """``job/a job/b``, ``job a b``, or (with a default kind) ``a b``: the kind and names."""
    if not args:
        if default_kind is None:
            fail("name a kind")
        return default_kind, []
    kinds = {a.partition("/")[0].lower() for a in args if "/" in a}
    if kinds:
        if len(kinds) > 1 or any("/" not in a for a in args):
            fail("give every target as KIND/NAME of one kind, or KIND NAME NAME...")
        return args[0].partition("/")[0], [a.partition("/")[2] for a in args]
    if default_kind is not None and not _is_kind(args[0]):
        return default_kind, list(args)
    return args[0], list(args[1:])


def _is_kind(word: str) -> bool:
    return word.lower() in complete.kind_words()


def _select(
    api: Client,
    kind: str,
    names: list[str],
    tenant: str | None,
    keep: Callable[[dict[str, Any]], bool] | None,
    *,
    every: bool,
) -> list[str]:
    """Names given, or those of the kind's objects the filter keeps (or all with --all)."""
    if names:
        if keep is not None or every:
            fail("give names, or a selector (-l, --phase, --queue, --all), not both")
        return names
    if keep is None and not every:
        fail("name the objects, or select them with -l, --phase, --queue or --all")
    items = api.list(kind, tenant)
    return [item["metadata"]["name"] for item in items if keep is None or keep(item)]


def _each(names: list[str], act: Callable[[str], str]) -> None:
    """Act on every name; one failing does not stop the others; the exit code is the first
    failure's."""
    code = 0
    for name in names:
        try:
            print(act(name))
        except AipaasError as err:
            report(err)
            code = code or exit_code(err)
    if code:
        raise typer.Exit(code)


def delete(
    targets: Targets = None,
    tenant: Tenant = None,
    selector: Selector = None,
    phase: Phase = None,
    queue: Queue = None,
    every: All = False,
) -> None:
    """Delete objects by name or selector (a running job is cancelled first).

    KIND NAME..., KIND/NAME..., or KIND with -l, --phase, --queue or --all."""
    kind, names = targets_of(targets or [], None)
    keep = _filter(selector, phase, queue)
    with client() as api:
        chosen = _select(api, kind, names, tenant, keep, every=every)
        if not chosen:
            print("nothing matched", file=sys.stderr)
            return
        _each(chosen, lambda name: api.delete(kind, name, tenant))


def cancel(
    targets: Targets = None,
    tenant: Tenant = None,
    selector: Selector = None,
    phase: Phase = None,
    queue: Queue = None,
    every: All = False,
) -> None:
    """Cancel jobs by name or selector: their processes are stopped.

    job/NAME..., NAME..., or -l, --phase, --queue or --all (unfinished jobs only)."""
    kind, names = targets_of(targets or [], "job")
    if kind.lower() not in ("job", "jobs"):
        fail("only jobs can be cancelled")
    keep = _filter(selector, phase, queue)
    with client() as api:
        unfinished: Callable[[dict[str, Any]], bool] | None = None
        if keep is not None or every:

            def unfinished(job: dict[str, Any]) -> bool:
                return selectors.phase_of(job) not in FINISHED and (keep is None or keep(job))

        chosen = _select(api, "job", names, tenant, unfinished, every=False)
        if not chosen:
            print("nothing matched", file=sys.stderr)
            return

        def one(name: str) -> str:
            api.cancel(name, tenant)
            return f"job {name} cancelling"

        _each(chosen, one)


def rerun(
    target: Annotated[str, typer.Argument(help="job/NAME", autocompletion=complete.jobs)],
    tenant: Tenant = None,
) -> None:
    """Submit a job again from its spec, as a new job NAME-2, NAME-3...

    The new job is annotated with the one it reruns (aipaas.io/rerun-of); the original and its
    logs and events stay."""
    kind, names = targets_of([target], "job")
    if kind.lower() not in ("job", "jobs") or len(names) != 1:
        fail("rerun takes one job: job/NAME")
    with client() as api:
        answer = api.rerun(names[0], tenant)
    print(f"job/{answer['name']} {answer['action']} (rerun of job/{names[0]})")


def wait(
    targets: Targets = None,
    for_: Annotated[
        str,
        typer.Option(
            "--for", help="phase=PHASE, condition=TYPE, jsonpath={...}=VALUE, create or delete."
        ),
    ] = "phase=Succeeded",
    timeout: Annotated[
        str, typer.Option("--timeout", help="Give up after: 30s, 10m, 1h (exit code 6).")
    ] = "30s",
    tenant: Tenant = None,
    selector: Selector = None,
    every: All = False,
) -> None:
    """Wait until objects meet a condition: `aipaas wait job/NAME --for=phase=Succeeded`."""
    kind, names = targets_of(targets or [], "job")
    keep = _filter(selector, None, None)
    if not names and keep is None and not every:
        fail("name what to wait for: job/NAME, or select it with -l or --all")
    seconds = duration_seconds(timeout)
    if seconds is None:
        fail(f"--timeout {timeout!r}: use a duration such as 30s, 10m, 1h")
    if for_ not in ("delete", "create"):
        try:
            condition(for_)
        except ValueError as err:
            fail(str(err))
    deadline = time.monotonic() + seconds
    with client() as api:
        if not names:
            names = _select(api, kind, [], tenant, keep, every=every)
            if not names:
                fail("nothing matched", EXIT_NOT_FOUND)
        for name in names:
            left = max(deadline - time.monotonic(), 0.001)
            try:
                api.wait(kind, name, for_, tenant=tenant, timeout=left)
            except WaitTimeout:
                what = {"delete": "to be deleted", "create": "to be created"}.get(
                    for_, f"for {for_}"
                )
                kind_name = f"{kind.lower().rstrip('s')}/{name}"
                fail(f"timed out after {timeout} waiting {what} on {kind_name}", EXIT_TIMEOUT)
            done = {"delete": "deleted", "create": "created"}.get(for_, "condition met")
            print(f"{kind.lower().rstrip('s')}/{name} {done}", flush=True)


def _filter(
    selector: str | None, phase: str | None, queue: str | None
) -> Callable[[dict[str, Any]], bool] | None:
    if not selectors.filtering(selector, phase, queue):
        return None
    try:
        return selectors.make_filter(selector, phase, queue)
    except selectors.SelectorError as err:
        fail(str(err))


__all__ = ["cancel", "delete", "duration_seconds", "handled", "rerun", "wait"]
