"""The control-plane commands: server, up, apply, get, describe, delete, cancel, logs, events,
tokens. They talk to the server only through aipaas.client (except `server` and `up`, which
start one)."""

from __future__ import annotations

import typer

from aipaas.cli import control_objects, control_server


def register(app: typer.Typer) -> None:
    """Add this group's commands to the `aipaas` app."""
    control_server.register(app)
    control_objects.register(app)
