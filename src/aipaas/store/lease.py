"""A lease in the database: at most one live holder per name (the controller's).

API servers can be many; the controller runs where the lease is held. A holder renews it every
cycle; when it stops renewing (crash, kill -9), another process takes it over after ``ttl``.
Times are wall-clock seconds, so holders on several hosts need synchronised clocks (NTP).

Fencing: every takeover raises the lease's ``token``. A holder writes only in transactions that
``fence`` first (a conditional update that renews the lease only while it is still this
holder's, with this token, unexpired: the row stays locked until the commit, so a takeover
waits for that write and a write after a takeover is refused), and its backend starts carry
the token, so a backend that saw a higher one refuses them (backends/fencing.py).
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from aipaas.store import tables
from aipaas.store.store import Store

CONTROLLER = "controller"


class LeaseLost(Exception):
    """This holder no longer holds the lease (taken over, expired): its write was refused."""


class Lease:
    def __init__(self, store: Store, holder: str, *, name: str = CONTROLLER, ttl: float = 15.0):
        self.store = store
        self.holder = holder
        self.name = name
        self.ttl = ttl
        #: the fencing token of the lease while this holder has it (None before the first
        #: acquire and after a lost or released lease)
        self.token: int | None = None

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
                            name=self.name, holder=self.holder, expires_at=now + self.ttl, token=1
                        )
                    )
                    self.token = 1
                    return True
                if (
                    row["holder"] != self.holder
                    and row["expires_at"] > now
                    and not _is_dead_here(row["holder"])
                ):
                    self.token = None
                    return False
                # A renewal keeps the token only if nobody held the lease in between (same
                # holder, same token); anything else is a takeover and raises it.
                renewal = row["holder"] == self.holder and row["token"] == self.token
                token = int(row["token"]) if renewal else int(row["token"]) + 1
                result = tx.execute(
                    update(tables.leases)
                    .where(
                        tables.leases.c.name == self.name,
                        tables.leases.c.holder == row["holder"],
                        tables.leases.c.expires_at == row["expires_at"],
                        tables.leases.c.token == row["token"],
                    )
                    .values(holder=self.holder, expires_at=now + self.ttl, token=token)
                )
                held = bool(result.rowcount == 1)
                self.token = token if held else None
                return held
        except IntegrityError:
            self.token = None
            return False  # another process inserted it first

    def fence(self, conn: Connection) -> None:
        """Inside a write transaction: renew the lease if it is still this holder's with this
        token and unexpired, else raise ``LeaseLost`` (the transaction then rolls back).

        The conditional update keeps the lease row locked until the transaction ends (on
        PostgreSQL a row lock; on SQLite the writers' lock the transaction already holds), so
        no takeover can happen between this check and the commit of what the holder writes."""
        if self.token is None:
            raise LeaseLost(f"fencing: {self.holder} does not hold the {self.name} lease")
        now = self.store.clock.now().timestamp()
        result = conn.execute(
            update(tables.leases)
            .where(
                tables.leases.c.name == self.name,
                tables.leases.c.holder == self.holder,
                tables.leases.c.token == self.token,
                tables.leases.c.expires_at > now,
            )
            .values(expires_at=now + self.ttl)
        )
        if result.rowcount != 1:
            token, self.token = self.token, None
            raise LeaseLost(
                f"fencing: {self.holder} lost the {self.name} lease (token {token}): "
                "its write is refused"
            )

    def release(self) -> None:
        with self.store.transaction() as tx:
            tx.execute(
                update(tables.leases)
                .where(tables.leases.c.name == self.name, tables.leases.c.holder == self.holder)
                .values(expires_at=0.0)
            )
        self.token = None

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
