"""The bootstrap: a real platform-admin User and its token, made when no admin holds a live
token, and never a revoked token brought back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.api.tenancy import Role, User
from aipaas.server.bootstrap import ADMIN_USER, ensure_admin_token
from aipaas.store import Store
from aipaas.tenancy.tokens import hash_token


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    yield opened
    opened.close()


def test_first_start_makes_a_tenantless_admin_user_and_its_token(
    store: Store, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin-token"
    token = ensure_admin_token(store, token_file, None)
    assert token is not None and token_file.read_text().strip() == token
    assert token_file.stat().st_mode & 0o777 == 0o600
    admin = store.find("User", "", ADMIN_USER)
    assert isinstance(admin, User) and admin.spec.role is Role.PLATFORM_ADMIN
    found = store.tokens.token_and_owner(hash_token(token))
    assert found is not None and found[1] == admin and found[0].name == "bootstrap"
    assert ensure_admin_token(store, token_file, None) is None  # a live one exists
    assert len(store.tokens.list_tokens()) == 1


def test_a_revoked_bootstrap_token_never_comes_back(store: Store, tmp_path: Path) -> None:
    given = "given-admin-token"
    assert ensure_admin_token(store, tmp_path / "t", given) == given
    (record,) = store.tokens.list_tokens()
    store.tokens.revoke_token(record.id, store.clock.now())
    again = ensure_admin_token(store, tmp_path / "t", given)
    assert again is not None and again != given  # a fresh random one: no admin was left
    revived = store.tokens.find_token(hash_token(given))
    assert revived is not None and revived.revoked_at is not None
    assert len(store.tokens.list_tokens()) == 2
