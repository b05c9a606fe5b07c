"""Backfill reservations (EASY): placeholder with the interface allocate uses; its owner
(backfill) replaces the body."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Job, Reservation

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


class Reservations:
    """The cycle's reservations. ``allowed_nodes(job)``: the nodes ``job`` may start on now
    without delaying a reservation (None: any); ``reserve(job)``: give a job that cannot start
    for lack of room a reservation at the earliest time it can (None if it gets none)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.held: dict[str, Reservation] = {}

    def allowed_nodes(self, job: Job) -> frozenset[str] | None:
        return None

    def reserve(self, job: Job) -> Reservation | None:
        return None
