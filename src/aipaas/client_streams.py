"""The SDK's streams: ``Client.watch``, ``Client.wait``, ``Client.follow_events`` and
``Client.rerun`` (client.py delegates here to keep each module small).

A watch reads the server's newline-delimited JSON stream (server/watch_routes.py) and, when
the connection drops or the server ends the stream, reconnects from the last bookmark: a caller
sees one stream for as long as it asks, with a change the server repeats on resume (the same
resourceVersion) dropped.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from aipaas import jsonpath
from aipaas.errors import AipaasError, NotFound, Unavailable, error_class

if TYPE_CHECKING:
    from aipaas.client import Client

MAX_STREAM_SECONDS = 3600  # the server's bound on one stream
READ_TIMEOUT = 60.0  # the server sends a bookmark at least every 15 s
RECONNECTS = 5  # in a row, without a bookmark in between
RERUN_OF = "aipaas.io/rerun-of"  # the job a rerun was made from
RERUN_ROOT = "aipaas.io/rerun-root"  # the first job of the chain: reruns are ROOT-2, ROOT-3...
FINISHED_PHASES = ("Succeeded", "Failed", "Cancelled")

Condition = str | Callable[[dict[str, Any]], bool]


class WaitTimeout(AipaasError):
    """``wait`` gave up: the condition did not hold within the timeout."""

    code = "Timeout"


class WaitFailed(AipaasError):
    """``wait`` cannot succeed: the job ended in another phase than the one waited for."""

    code = "ConditionUnreachable"


def watch(
    client: Client,
    path: str,
    params: dict[str, str],
    *,
    resource_version: str | None,
    timeout: float | None,
    bookmarks: bool,
) -> Iterator[dict[str, Any]]:
    deadline = None if timeout is None else time.monotonic() + timeout
    cursor = resource_version
    seen: dict[str, str | None] = {}
    reconnected = False
    failures = 0
    while True:
        left = _left(deadline)
        if left is not None and left <= 0:
            return
        query = dict(params)
        query["timeoutSeconds"] = str(max(1, min(MAX_STREAM_SECONDS, math.ceil(left or 1e9))))
        if cursor:
            query["resourceVersion"] = cursor
        try:
            for document in _lines(client, path, query, left):
                kind = document.get("type")
                if kind == "BOOKMARK":
                    cursor = str(document["object"]["metadata"]["resourceVersion"])
                    failures = 0
                    if bookmarks:
                        yield document
                    continue
                if kind == "ERROR":
                    detail = document.get("object") or {}
                    raise error_class(str(detail.get("code", "")))(str(detail.get("message")))
                obj = document.get("object") or {}
                meta = obj.get("metadata") or {}
                uid = str(meta.get("uid") or "")
                if kind == "DELETED":
                    if reconnected and uid not in seen:
                        continue  # named by a deletion event, never seen by this watch
                    seen.pop(uid, None)
                elif seen.get(uid, "") == meta.get("resourceVersion"):
                    continue  # repeated after a resume
                else:
                    seen[uid] = meta.get("resourceVersion")
                yield document
        except Unavailable:
            failures += 1
            if failures > RECONNECTS:
                raise
            time.sleep(min(0.2 * 2**failures, 5.0))
        reconnected = True


def _lines(
    client: Client, path: str, query: dict[str, str], left: float | None
) -> Iterator[dict[str, Any]]:
    read = READ_TIMEOUT if left is None else min(READ_TIMEOUT, left + 5)
    timeout = httpx.Timeout(10.0, read=read)
    try:
        with client.http.stream("GET", path, params=query, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                from aipaas.client import _error

                raise _error(response)
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)
    except httpx.ReadTimeout:
        if left is not None and left <= READ_TIMEOUT:
            return  # the caller's own time is up: the loop ends the watch
        raise Unavailable(f"{client.url}: the stream went quiet") from None
    except httpx.TransportError as err:
        raise Unavailable(f"cannot reach {client.url}: {err}") from err


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def condition(text: Condition) -> Callable[[dict[str, Any]], bool]:
    """A test of the object from ``for_``: ``phase=Succeeded``; ``condition=Ready`` (a status
    condition that is True; ``condition=Ready=false`` for False); ``jsonpath={.status.phase}=
    Running`` (the template's value, or with no ``=VALUE`` any non-empty value, as kubectl);
    or a function of the object. ``delete`` and ``create`` are ``wait``'s own. ValueError for
    anything else."""
    if callable(text):
        return text
    key, _, value = text.partition("=")
    if key == "phase" and value:
        return lambda obj: str(_status(obj).get("phase", "")).lower() == value.lower()
    if key == "condition" and value:
        kind, _, wanted = value.partition("=")
        state = {"": "True", "true": "True", "false": "False"}.get(wanted.lower())
        if state is None:
            raise ValueError(f"--for {text!r}: condition=TYPE, =TYPE=true or =TYPE=false")
        return lambda obj: any(
            c.get("type", "").lower() == kind.lower() and c.get("status") == state
            for c in _status(obj).get("conditions") or []
        )
    if key == "jsonpath" and value:
        return _jsonpath_condition(text, value)
    raise ValueError(
        f"--for {text!r}: use phase=PHASE, condition=TYPE, jsonpath={{...}}=VALUE, create or delete"
    )


def _jsonpath_condition(text: str, value: str) -> Callable[[dict[str, Any]], bool]:
    template, wanted = value, None
    if value[:1] in "'\"" and value.count(value[0]) >= 2:
        end = value.index(value[0], 1)
        template, rest = value[1:end], value[end + 1 :]
        wanted = rest[1:] if rest.startswith("=") else None
    elif value.startswith("{") and "}" in value:
        end = value.rindex("}")
        template, rest = value[: end + 1], value[end + 1 :]
        wanted = rest[1:] if rest.startswith("=") else None
    try:
        jsonpath.render(template, {})
    except jsonpath.JsonPathError as err:
        raise ValueError(f"--for {text!r}: {err}") from err

    def holds(obj: dict[str, Any]) -> bool:
        shown = jsonpath.render(template, obj)
        return shown == wanted if wanted is not None else shown != ""

    return holds


def wait(
    client: Client,
    kind: str,
    name: str,
    for_: Condition,
    *,
    tenant: str | None,
    timeout: float,
) -> dict[str, Any] | None:
    deleting = for_ == "delete"
    creating = for_ == "create"
    holds = (lambda _: creating) if deleting or creating else condition(for_)
    wanted_phase = _phase_of(for_)
    deadline = time.monotonic() + timeout
    present = False
    try:
        events = client.watch(kind, name=name, tenant=tenant, timeout=timeout, bookmarks=True)
        for event in events:
            kind_of = event["type"]
            if kind_of == "BOOKMARK":
                if not present and not (deleting or creating):
                    raise NotFound(f"{kind.lower()} {name} not found")
                if not present and deleting:
                    return None
                continue
            obj = event["object"]
            if kind_of == "DELETED":
                if deleting:
                    return None
                if creating:
                    continue
                raise NotFound(f"{kind.lower()} {name} was deleted")
            present = True
            if holds(obj):
                return dict(obj)
            phase = _status(obj).get("phase")
            if wanted_phase and phase in FINISHED_PHASES and phase.lower() != wanted_phase:
                why = _status(obj).get("reason") or ""
                raise WaitFailed(
                    f"{kind.lower()} {name} ended {phase}"
                    + (f" ({why})" if why else "")
                    + f", not {wanted_phase.capitalize()}"
                )
    except Unavailable:
        if time.monotonic() < deadline:
            raise
    what = {"delete": "to be deleted", "create": "to be created"}.get(str(for_), f"for {for_}")
    raise WaitTimeout(f"timed out after {timeout:g}s waiting {what} on {kind.lower()}/{name}")


def _phase_of(for_: Condition) -> str | None:
    if isinstance(for_, str) and for_.startswith("phase="):
        return for_.partition("=")[2].lower()
    return None


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = obj.get("status") or {}
    return status


def follow_events(
    client: Client, params: dict[str, str], *, after: int, timeout: float | None
) -> Iterator[dict[str, Any]]:
    deadline = None if timeout is None else time.monotonic() + timeout
    last = after
    failures = 0
    while True:
        left = _left(deadline)
        if left is not None and left <= 0:
            return
        query = {**params, "after": str(last)}
        query["timeoutSeconds"] = str(max(1, min(MAX_STREAM_SECONDS, math.ceil(left or 1e9))))
        try:
            for event in _lines(client, "/watch/events", query, left):
                if event.get("type") == "ERROR":
                    detail = event.get("object") or {}
                    raise error_class(str(detail.get("code", "")))(str(detail.get("message")))
                last = int(event["id"])
                failures = 0
                yield event
        except Unavailable:
            failures += 1
            if failures > RECONNECTS:
                raise
            time.sleep(min(0.2 * 2**failures, 5.0))


# The platform's own label and annotation keys (server/submission.py says the same): a rerun
# leaves them out, since users may not write them.
_SYSTEM_DOMAIN = "aipaas.dev"
_USER_DOMAINS = frozenset({"sim.aipaas.dev", "kubernetes.aipaas.dev"})  # as server/submission.py


def is_system_key(key: str) -> bool:
    prefix, slash, _ = key.partition("/")
    if not slash or prefix in _USER_DOMAINS:
        return False
    return prefix == _SYSTEM_DOMAIN or prefix.endswith("." + _SYSTEM_DOMAIN)


def rerun(client: Client, name: str, tenant: str | None) -> dict[str, Any]:
    """A new job from ``name``'s spec, named ROOT-N (the next free N), annotated with the job
    it reruns; the original and its history stay."""
    original = client.get("job", name, tenant)
    meta = original["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not is_system_key(k)}
    root = annotations.get(RERUN_ROOT, meta["name"])
    owner = meta.get("tenant")
    taken = {job["metadata"]["name"] for job in client.list("job", owner)}
    number = 2
    while _rerun_name(root, number) in taken:
        number += 1
    annotations.update({RERUN_OF: meta["name"], RERUN_ROOT: root})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not is_system_key(k)}
    manifest = {
        "apiVersion": original.get("apiVersion", "aipaas/v1"),
        "kind": "Job",
        "metadata": {
            "name": _rerun_name(root, number),
            "tenant": owner,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": original["spec"],
    }
    (answer,) = client.apply(json.dumps(manifest))
    return answer


def _rerun_name(root: str, number: int) -> str:
    suffix = f"-{number}"
    return root[: 63 - len(suffix)].rstrip("-") + suffix
