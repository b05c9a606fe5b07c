"""A lease in the database: at most one live holder per name (the controller's).

API servers can be many; the controller runs where the lease is held. A holder renews it every
cycle; when it stops renewing (crash, kill -9), another process takes it over after ``ttl``.
Times are wall-clock seconds, so holders on several hosts need synchronised clocks (NTP).
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from aipaas.store import tables
from aipaas.store.store import Store

CONTROLLER = "controller"


class Lease:
    def __init__(self, store: Store, holder: str, *, name: str = CONTROLLER, ttl: float = 15.0):
        self.store = store
        self.holder = holder
        self.name = name
        self.ttl = ttl

    def acquire(self) -> bool:
        """Take or renew the lease; True while this holder has it."""
        now = self.store.clock.now().timestamp()
        try:
            with self.store.transaction() as tx:
                row = (
                    tx.execute(select(tables.leases).where(tables.leases.c.name == self.name))
                    .mappings()
                    .first()
                )
                if row is None:
                    tx.execute(
                        insert(tables.leases).values(
                            name=self.name, holder=self.holder, expires_at=now + self.ttl
                        )
                    )
                    return True
                if (
                    row["holder"] != self.holder
                    and row["expires_at"] > now
                    and not _is_dead_here(row["holder"])
                ):
                    return False
                result = tx.execute(
                    update(tables.leases)
                    .where(
                        tables.leases.c.name == self.name,
                        tables.leases.c.holder == row["holder"],
                        tables.leases.c.expires_at == row["expires_at"],
                    )
                    .values(holder=self.holder, expires_at=now + self.ttl)
                )
                return bool(result.rowcount == 1)
        except IntegrityError:
            return False  # another process inserted it first

    def release(self) -> None:
        with self.store.transaction() as tx:
            tx.execute(
                update(tables.leases)
                .where(tables.leases.c.name == self.name, tables.leases.c.holder == self.holder)
                .values(expires_at=0.0)
            )

    def holder_now(self) -> str | None:
        """The live holder, if any."""
        now = self.store.clock.now().timestamp()
        with self.store.transaction(write=False) as tx:
            row = (
                tx.execute(select(tables.leases).where(tables.leases.c.name == self.name))
                .mappings()
                .first()
            )
        if row is None or row["expires_at"] <= now:
            return None
        return str(row["holder"])


def holder_id(nonce: str) -> str:
    """``host:pid:nonce``: lets a restarted process on the same host see its predecessor died."""
    return f"{socket.gethostname()}:{os.getpid()}:{nonce}"


def _is_dead_here(holder: str) -> bool:
    """The holder ran on this host and its process is gone (killed): no need to wait out ttl."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
