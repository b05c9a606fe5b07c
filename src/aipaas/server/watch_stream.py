"""The watch streams' rules: what a caller sees change, as a sequence of lines.

An object watch lists the caller's visible objects of a kind once (through ObjectService, so
that visibility is the lists' own: a tenant's watcher sees its tenant only), then takes the
batches of its process's change feed (server/watch_feed.py) and keeps of them what the caller
may see (``ObjectService.visible``, the lists' rules for one object): ADDED, MODIFIED (a newer
resourceVersion), DELETED; changes between two reads come as one (the latest state). After
the first read and after each batch that held changes it sends a BOOKMARK whose
``metadata.resourceVersion`` is where a new watch resumes: the objects changed since then come
as MODIFIED (ADDED when created since), and objects a deletion event named since, now gone, as
DELETED. A resumed watch may
repeat a change it had already sent (same resourceVersion); the SDK drops those. The caller's
token is checked again at every read: a revoked token ends the stream with an ERROR line.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aipaas.api.meta import Object
from aipaas.api.registry import KINDS
from aipaas.errors import FieldError, InvalidObject, NotFound
from aipaas.server.service import ObjectService
from aipaas.server.watch_feed import Batch
from aipaas.store import changes
from aipaas.tenancy.principal import Principal

PAGE = 1000
# A write's updated_at is taken before it commits: a resumed watch looks this far further back
# so that a change committed just after the bookmark's read is not missed.
OVERLAP = timedelta(seconds=5)
# Deletions a resumed watch replays: DeleteRequested may precede the delete itself by a while.
DELETION_LOOKBACK = timedelta(hours=1)
_CURSOR_PREFIX = "w1."


def encode_cursor(moment: datetime) -> str:
    micros = int(moment.timestamp() * 1_000_000)
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(str(micros).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> datetime:
    """The time a bookmark stands for; 422 naming resourceVersion for anything else."""
    try:
        if not text.startswith(_CURSOR_PREFIX):
            raise ValueError(text)
        body = text[len(_CURSOR_PREFIX) :]
        micros = int(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode())
        return datetime.fromtimestamp(micros / 1_000_000, UTC)
    except (ValueError, binascii.Error, OverflowError, UnicodeDecodeError) as err:
        raise InvalidObject(
            [FieldError("resourceVersion", "not a bookmark this server gave out")]
        ) from err


def event_line(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(cursor: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": cursor}}}


@dataclass
class ObjectWatch:
    """One caller's watch of one kind (optionally one name, one tenant)."""

    service: Callable[[], ObjectService]  # a fresh one per read: the caller is checked again
    kind: str
    tenant: str | None
    name: str | None
    known: dict[str, Object] = field(default_factory=dict)
    checked: bool = False  # a first read listed the scope: the caller may see it

    def read(self) -> dict[str, Object]:
        """The visible objects now, by uid (one row's read when the watch names one, once the
        first read has checked that the caller may see where it is)."""
        service = self.service()
        found: dict[str, Object] = {}
        if self.name is not None and self.checked:
            try:
                obj = service.get(self.kind, self.name, self.tenant)
            except NotFound:
                return found
            found[obj.metadata.uid or ""] = obj
            return found
        self.checked = True
        after = 0
        while True:
            page = service.list_page(self.kind, self.tenant, limit=PAGE, after=after)
            for obj in page.items:
                if self.name is None or obj.name == self.name:
                    found[obj.metadata.uid or ""] = obj
            if page.next_after is None:
                return found
            after = page.next_after

    def start(self, store_now: datetime, resume: datetime | None) -> tuple[list[Any], str]:
        """The first lines: everything as ADDED, or (resuming) what changed since ``resume``;
        then the bookmark."""
        current = self.read()
        cursor = encode_cursor(store_now)
        lines: list[Any] = []
        if resume is None:
            lines = [event_line("ADDED", obj.to_wire()) for obj in current.values()]
        else:
            lines = self._since(current, resume)
        self.known = current
        return [*lines, bookmark(cursor)], cursor

    def _since(self, current: dict[str, Object], resume: datetime) -> list[Any]:
        service = self.service()
        store = service.store
        changed = changes.updated_since(store, self.kind, resume - OVERLAP)
        lines = []
        for uid, obj in current.items():
            if uid in changed:
                created = _time(obj.metadata.creation_timestamp)
                new = created is not None and created > resume
                lines.append(event_line("ADDED" if new else "MODIFIED", obj.to_wire()))
        seen: set[str] = set()
        for gone in changes.deletions_since(store, self.kind, resume - DELETION_LOOKBACK):
            if gone.uid in current or gone.uid in seen or not self._may_see(service, gone):
                continue
            if self.name is not None and gone.name != self.name:
                continue
            seen.add(gone.uid)
            stub = {
                "kind": gone.kind,
                "metadata": {"name": gone.name, "tenant": gone.tenant or None, "uid": gone.uid},
            }
            lines.append(event_line("DELETED", stub))
        return lines

    def _may_see(self, service: ObjectService, gone: changes.Deletion) -> bool:
        caller: Principal = service.caller
        if not KINDS[self.kind].namespaced:
            return caller.is_platform_admin
        if self.tenant is not None and gone.tenant != self.tenant:
            return False
        if not caller.is_platform_admin and self.tenant is None:
            return gone.tenant == caller.tenant
        return caller.sees_tenant(gone.tenant)

    def take(self, batch: Batch) -> list[Any]:
        """The lines of a change-feed batch that this caller may see: what is newer than what
        it was sent, and what it was sent that is gone."""
        service = self.service()  # the caller is checked again at each batch
        lines = []
        for changed in batch.changed:
            if self.name is not None and changed.name != self.name:
                continue
            obj = service.visible(self.kind, self.tenant, changed)
            if obj is None:
                continue
            uid = obj.metadata.uid or ""
            before = self.known.get(uid)
            if before is None:
                lines.append(event_line("ADDED", obj.to_wire()))
            elif _version(before) < _version(obj):
                lines.append(event_line("MODIFIED", obj.to_wire()))
            else:
                continue  # sent already (the feed reads a little back in time)
            self.known[uid] = obj
        for uid in batch.deleted & self.known.keys():
            lines.append(event_line("DELETED", self.known.pop(uid).to_wire()))
        return lines


def _version(obj: Object) -> int:
    """An object's resourceVersion as a number (each write bumps it by one)."""
    text = obj.metadata.resource_version or "0"
    return int(text) if text.isdigit() else 0


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
