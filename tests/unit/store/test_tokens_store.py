"""Tokens in the store, on SQLite and PostgreSQL: owned by a uid, revoked, touched, listed;
and migration 0003 on a database of the old schema."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

from aipaas.api.meta import ObjectMeta
from aipaas.api.tenancy import Role, Tenant, User, UserSpec
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.store import Store
from aipaas.store.database import MIGRATIONS, make_engine, migrate
from aipaas.store.pgtest import ThrowawayPostgres

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def _user(store: Store, name: str, tenant: str | None = "acme", role: Role = Role.MEMBER) -> User:
    if tenant and store.find("Tenant", "", tenant) is None:
        store.create(Tenant(metadata=ObjectMeta(name=tenant)))
    created = store.create(
        User(metadata=ObjectMeta(name=name, tenant=tenant), spec=UserSpec(role=role))
    )
    assert isinstance(created, User)
    return created


class TestTokens:
    def test_a_token_belongs_to_its_owners_uid(self, store: Store) -> None:
        alice = _user(store, "alice")
        made = store.tokens.add_token("ab" * 32, "tok_a", alice, name="ci", expires_at=NOW)
        assert (made.id, made.name, made.owner_uid, made.user, made.tenant) == (
            "tok_a",
            "ci",
            alice.metadata.uid,
            "alice",
            "acme",
        )
        found = store.tokens.token_and_owner("ab" * 32)
        assert found is not None
        record, owner = found
        assert record == made and owner == store.get("User", "acme", "alice")
        assert record.expires_at == NOW and record.created_at.tzinfo is not None
        assert store.tokens.token_and_owner("cd" * 32) is None

    def test_a_new_user_of_an_old_name_is_not_the_owner(self, store: Store) -> None:
        alice = _user(store, "alice")
        store.tokens.add_token("ab" * 32, "tok_a", alice)
        store.delete("User", "acme", "alice")
        _user(store, "alice", role=Role.TENANT_ADMIN)
        found = store.tokens.token_and_owner("ab" * 32)
        assert found is not None and found[1] is None

    def test_revoke_one_and_all_of_an_owner(self, store: Store) -> None:
        alice, bob = _user(store, "alice"), _user(store, "bob")
        for index, owner in enumerate((alice, alice, bob)):
            store.tokens.add_token(f"{index:064d}", f"tok_{index}", owner)
        assert store.tokens.revoke_token("tok_0", NOW) is True
        assert store.tokens.revoke_token("tok_0", NOW + timedelta(hours=1)) is False
        with store.transaction() as tx:
            assert store.tokens.revoke_tokens_of(alice.metadata.uid or "", NOW, conn=tx) == 1
        revoked = {t.id: t.revoked_at for t in store.tokens.list_tokens()}
        assert revoked == {"tok_0": NOW, "tok_1": NOW, "tok_2": None}

    def test_list_by_tenant_and_owner_and_touch(self, store: Store) -> None:
        alice, bob = _user(store, "alice"), _user(store, "bob", tenant="globex")
        store.tokens.add_token("a" * 64, "tok_a", alice)
        store.tokens.add_token("b" * 64, "tok_b", bob)
        assert [t.id for t in store.tokens.list_tokens(tenant="globex")] == ["tok_b"]
        assert [t.id for t in store.tokens.list_tokens(owner_uid=alice.metadata.uid)] == ["tok_a"]
        store.tokens.touch_token("tok_a", NOW)
        touched = store.tokens.get_token("tok_a")
        assert touched is not None and touched.last_used_at == NOW
        assert store.tokens.get_token("tok_zz") is None


def _config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _at_0002(engine: Engine) -> None:
    config = _config(engine)
    with engine.connect().execution_options(immediate=True) as conn, conn.begin():
        config.attributes["connection"] = conn
        command.upgrade(config, "0002")


@pytest.fixture(params=["sqlite", "postgresql"])
def old_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        server: ThrowawayPostgres = request.getfixturevalue("postgres")
        server.reset()
        url = server.url
    engine = make_engine(url)
    yield engine
    engine.dispose()


def test_migration_0003_gives_old_tokens_their_owners(old_engine: Engine, tmp_path: Path) -> None:
    _at_0002(old_engine)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    with old_engine.connect().execution_options(immediate=True) as conn, conn.begin():
        conn.execute(
            text(
                "INSERT INTO objects (kind, tenant, name, uid, resource_version, generation,"
                " phase, body, status, created_at, updated_at) VALUES ('User', 'acme', 'alice',"
                " 'uid-alice', 1, 1, '', '{}', NULL, :when, :when)"
            ),
            {"when": when},
        )
        rows = [
            ("1" * 64, "alice", "acme", "member"),  # alice exists: hers
            ("2" * 64, "admin", "", "platform-admin"),  # the bootstrap token: adopted later
            ("3" * 64, "carol", "acme", "member"),  # carol is gone: revoked
        ]
        for token_hash, user, tenant, role in rows:
            conn.execute(
                text(
                    'INSERT INTO tokens (token_hash, "user", tenant, role, created_at)'
                    " VALUES (:h, :u, :t, :r, :c)"
                ),
                {"h": token_hash, "u": user, "t": tenant, "r": role, "c": when},
            )
    migrate(old_engine)
    store = Store(old_engine)
    records = {t.user: t for t in store.tokens.list_tokens()}
    assert records["alice"].owner_uid == "uid-alice" and records["alice"].revoked_at is None
    assert records["admin"].owner_uid == "" and records["admin"].revoked_at is None
    assert records["carol"].owner_uid == "" and records["carol"].revoked_at is not None
    assert len({t.id for t in records.values()}) == 3
    assert all(t.id.startswith("tok_") for t in records.values())
    # The server's bootstrap makes the admin User and gives it the old admin token, which
    # keeps working; no new token is made, since that one is live.
    assert ensure_admin_token(store, tmp_path / "admin-token", None) is None
    found = store.tokens.token_and_owner("2" * 64)
    assert found is not None and isinstance(found[1], User)
    assert found[1].spec.role is Role.PLATFORM_ADMIN and found[1].tenant == ""
    assert found[0].owner_uid == found[1].metadata.uid and found[0].user == "admin"
    carol = store.tokens.find_token("3" * 64)
    assert carol is not None and carol.owner_uid == ""  # revoked ones stay ownerless
    assert not (tmp_path / "admin-token").exists()
    store.close()
