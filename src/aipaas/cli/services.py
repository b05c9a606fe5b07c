"""Service columns for `aipaas get services` (replicas ready/desired, phase, URL) and the
wide view's details; `aipaas describe service NAME` shows the object with its replicas and
events (the scaling decisions with their numbers among them)."""

from __future__ import annotations

import functools
import os
from typing import Any

import typer

from aipaas.cli import columns
from aipaas.cli.columns import Column, age, meta, spec, status


@functools.cache
def _server_url() -> str:
    """The server the CLI talks to (as the client resolves it), for full entry point URLs."""
    from aipaas.client import Client

    try:
        client = Client.from_env(os.environ)
    except Exception:
        return ""
    url = client.url
    client.close()
    return url


def _url(service: dict[str, Any]) -> str:
    path = (service.get("status") or {}).get("url")
    return f"{_server_url()}{path}" if path else ""


def _replicas(service: dict[str, Any]) -> str:
    state = service.get("status") or {}
    return f"{state.get('readyReplicas', 0)}/{state.get('desiredReplicas', 0)}"


def _bounds(service: dict[str, Any]) -> str:
    body = service.get("spec") or {}
    low = body.get("minReplicas", 1)
    return f"{low}-{body.get('maxReplicas', max(low, 1))}"


def _target(service: dict[str, Any]) -> str:
    scaling = (service.get("spec") or {}).get("autoscaling")
    if not scaling:
        return "fixed"
    return f"{scaling['target']:g} {scaling.get('metric', 'concurrency')}"


def register(app: typer.Typer) -> None:
    del app  # no commands of its own: get and describe are the generic ones
    columns.register(
        "Service",
        [
            Column("NAME", meta("name")),
            Column("TENANT", meta("tenant")),
            Column("READY", _replicas),
            Column("PHASE", status("phase", "Pending")),
            Column("URL", _url),
            Column("AGE", age),
            Column("MIN-MAX", _bounds, wide_only=True),
            Column("TARGET", _target, wide_only=True),
            Column("QUEUE", spec("queue"), wide_only=True),
            Column("REVISION", status("revision"), wide_only=True),
            Column("UPDATED", status("updatedReplicas"), wide_only=True),
            Column("REASON", status("reason"), wide_only=True),
        ],
    )
