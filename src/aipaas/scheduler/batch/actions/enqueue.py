"""The enqueue action (placeholder: its owner replaces this file)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


def enqueue(session: Session) -> None:
    """Not built yet: does nothing."""
