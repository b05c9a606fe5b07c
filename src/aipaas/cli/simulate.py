"""Commands of this group are added by their domain; see cli/app.py."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this group's commands to the `aipaas` app."""
