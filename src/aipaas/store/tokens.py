"""The tokens table: bearer tokens by hash, their owners, uses and revocations. Reached as
``store.tokens`` (store/store.py); the Store's own methods of the same names hand over to it.
The token text itself is never stored (tenancy/tokens.py hashes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, func, insert, select, update

from aipaas.api.meta import Object
from aipaas.store import tables
from aipaas.store.paging import Page
from aipaas.store.rows import count_after, to_object

if TYPE_CHECKING:
    from aipaas.store.store import Store

_FIND_TOKEN = select(tables.tokens).where(tables.tokens.c.token_hash == bindparam("b_hash"))
_SELECT_UID = select(tables.objects).where(tables.objects.c.uid == bindparam("b_uid"))


@dataclass(frozen=True)
class TokenRecord:
    """A token as stored, without its hash. ``user`` and ``tenant`` are the owner's at
    creation, for listing; ``owner_uid`` is who it belongs to."""

    id: str
    name: str
    owner_uid: str
    user: str
    tenant: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenRepository:
    def __init__(self, store: Store) -> None:
        self._store = store  # its transactions and clock

    def add_token(
        self,
        token_hash: str,
        public_id: str,
        owner: Object,
        *,
        name: str = "",
        expires_at: datetime | None = None,
        created_at: datetime | None = None,
    ) -> TokenRecord:
        """A new token of ``owner`` (a User): it acts with that user's role, whatever it is."""
        values = {
            "token_hash": token_hash,
            "public_id": public_id,
            "name": name,
            "owner_uid": owner.metadata.uid or "",
            "user": owner.name,
            "tenant": owner.tenant,
            "created_at": created_at or self._store.clock.now(),
            "expires_at": expires_at,
        }
        with self._store.transaction() as tx:
            tx.execute(insert(tables.tokens).values(values))
        return _token({**values, "last_used_at": None, "revoked_at": None})

    def find_token(self, token_hash: str) -> TokenRecord | None:
        with self._store.transaction(write=False) as tx:
            row = tx.execute(_FIND_TOKEN, {"b_hash": token_hash}).mappings().first()
        return None if row is None else _token(row)

    def token_and_owner(self, token_hash: str) -> tuple[TokenRecord, Object | None] | None:
        """The token of this hash and the object of its owner's uid (None when it is gone)."""
        with self._store.transaction(write=False) as tx:
            row = tx.execute(_FIND_TOKEN, {"b_hash": token_hash}).mappings().first()
            if row is None:
                return None
            owner = (
                tx.execute(_SELECT_UID, {"b_uid": row["owner_uid"]}).mappings().first()
                if row["owner_uid"]
                else None
            )
        return _token(row), None if owner is None else to_object(owner)

    def get_token(self, public_id: str) -> TokenRecord | None:
        query = select(tables.tokens).where(tables.tokens.c.public_id == public_id)
        with self._store.transaction(write=False) as tx:
            row = tx.execute(query).mappings().first()
        return None if row is None else _token(row)

    def list_tokens(
        self, *, tenant: str | None = None, owner_uid: str | None = None
    ) -> list[TokenRecord]:
        """Tokens, oldest first; of one tenant and/or one owner when given."""
        query = select(tables.tokens).order_by(tables.tokens.c.id)
        if tenant is not None:
            query = query.where(tables.tokens.c.tenant == tenant)
        if owner_uid is not None:
            query = query.where(tables.tokens.c.owner_uid == owner_uid)
        with self._store.transaction(write=False) as tx:
            return [_token(row) for row in tx.execute(query).mappings()]

    def tokens_page(
        self,
        *,
        limit: int,
        after: int = 0,
        tenant: str | None = None,
        owner_uid: str | None = None,
    ) -> Page[TokenRecord]:
        """At most ``limit`` tokens after row id ``after``, oldest first (the API's list)."""
        tokens = tables.tokens
        where = [tokens.c.id > bindparam("b_after")]
        if tenant is not None:
            where.append(tokens.c.tenant == tenant)
        if owner_uid is not None:
            where.append(tokens.c.owner_uid == owner_uid)
        query = select(tokens).where(*where).order_by(tokens.c.id).limit(limit + 1)
        with self._store.transaction(write=False) as tx:
            rows = tx.execute(query, {"b_after": after}).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            last = int(rows[-1]["id"]) if more else None
            remaining = count_after(tx, tokens, where, last) if last is not None else None
        return Page([_token(row) for row in rows], last, remaining)

    def touch_token(self, public_id: str, when: datetime) -> None:
        """Record a use (the caller writes at most once a minute per token)."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.public_id == public_id)
            .values(last_used_at=when)
        )
        with self._store.transaction() as tx:
            tx.execute(query)

    def revoke_token(self, public_id: str, when: datetime) -> bool:
        """Revoke one token; False when it was revoked already."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.public_id == public_id, tables.tokens.c.revoked_at.is_(None))
            .values(revoked_at=when)
        )
        with self._store.transaction() as tx:
            return bool(tx.execute(query).rowcount)

    def revoke_tokens_of(self, owner_uid: str, when: datetime, *, conn: Connection) -> int:
        """Revoke every live token of one owner, in the caller's transaction."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.owner_uid == owner_uid, tables.tokens.c.revoked_at.is_(None))
            .values(revoked_at=when)
        )
        return int(conn.execute(query).rowcount)

    def adopt_tokens(self, owner: Object) -> int:
        """Give ``owner`` the unrevoked tokens that have no owner (the bootstrap token of a
        database from before tokens had owners, see migration 0003)."""
        query = (
            update(tables.tokens)
            .where(tables.tokens.c.owner_uid == "", tables.tokens.c.revoked_at.is_(None))
            .values(owner_uid=owner.metadata.uid or "", user=owner.name, tenant=owner.tenant)
        )
        with self._store.transaction() as tx:
            return int(tx.execute(query).rowcount)

    def count_tokens(self) -> int:
        with self._store.transaction(write=False) as tx:
            return int(tx.execute(select(func.count()).select_from(tables.tokens)).scalar_one())


def _token(row: Any) -> TokenRecord:
    return TokenRecord(
        id=row["public_id"],
        name=row["name"],
        owner_uid=row["owner_uid"],
        user=row["user"],
        tenant=row["tenant"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
    )
