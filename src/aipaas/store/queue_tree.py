"""Lookups of the queue tree that the server's submission checks need (server/submission.py):
which queues name a queue as their parent, which unfinished jobs wait in a queue.

One indexed query each, inside the caller's transaction: the rows are narrowed in SQL by the
text the stored body has for the field (bodies are compact JSON, store.py ``_body``) and then
confirmed on the parsed JSON, since a label or annotation may hold the same text.
"""

from __future__ import annotations

import json
from typing import Any, Final

from sqlalchemy import Connection, select

from aipaas.store import tables

#: the phases of a job that has finished (api/job.py JobPhase.finished)
FINISHED_PHASES: Final = ("Succeeded", "Failed", "Cancelled")


def child_queues(conn: Connection, tenant: str, parent: str, *, limit: int = 16) -> list[str]:
    """Names of the tenant's queues whose ``spec.parent`` is ``parent`` (at most ``limit``)."""
    objects = tables.objects
    query = (
        select(objects.c.name, objects.c.body)
        .where(
            objects.c.kind == "Queue",
            objects.c.tenant == tenant,
            objects.c.body.contains(f'"parent":{json.dumps(parent)}', autoescape=True),
        )
        .order_by(objects.c.id)
    )
    found = []
    for name, body in conn.execute(query):
        if _spec(body).get("parent") == parent:
            found.append(str(name))
            if len(found) >= limit:
                break
    return found


def unfinished_jobs_in(conn: Connection, tenant: str, queue: str, *, limit: int = 16) -> list[str]:
    """Names of the tenant's jobs in ``queue`` that have not finished (at most ``limit``)."""
    objects = tables.objects
    query = (
        select(objects.c.name, objects.c.body)
        .where(
            objects.c.kind == "Job",
            objects.c.tenant == tenant,
            objects.c.phase.not_in(FINISHED_PHASES),
            objects.c.body.contains(f'"queue":{json.dumps(queue)}', autoescape=True),
        )
        .order_by(objects.c.id)
    )
    found = []
    for name, body in conn.execute(query):
        if _spec(body).get("queue") == queue:
            found.append(str(name))
            if len(found) >= limit:
                break
    return found


def _spec(body: str) -> dict[str, Any]:
    spec = json.loads(body).get("spec")
    return spec if isinstance(spec, dict) else {}
