"""Role ranks, tenant-less roles and token lifetimes: the pure rules under the token routes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aipaas.api.tenancy import Role
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.tokens import ID_PREFIX, is_live, new_token_id, parse_lifetime

ROLES = list(Role)


@pytest.mark.parametrize(
    ("actor", "allowed"),
    [
        pytest.param(Role.PLATFORM_ADMIN, set(ROLES), id="platform admin: everyone"),
        pytest.param(
            Role.TENANT_ADMIN,
            {Role.TENANT_ADMIN, Role.MEMBER, Role.VIEWER},
            id="tenant admin: its rank and below",
        ),
        pytest.param(Role.MEMBER, {Role.MEMBER, Role.VIEWER}, id="member"),
        pytest.param(Role.VIEWER, {Role.VIEWER}, id="viewer"),
        pytest.param(Role.METRICS_READER, set(), id="metrics reader: nobody"),
    ],
)
def test_nobody_acts_on_a_role_above_its_own(actor: Role, allowed: set[Role]) -> None:
    caller = Principal("u", "" if actor.tenantless else "acme", actor)
    assert {role for role in ROLES if caller.may_act_on(role)} == allowed


def test_only_platform_admins_and_metrics_readers_are_tenantless() -> None:
    assert {role for role in ROLES if role.tenantless} == {
        Role.PLATFORM_ADMIN,
        Role.METRICS_READER,
    }


def test_a_metrics_reader_reads_and_writes_nothing_and_sees_no_tenant() -> None:
    reader = Principal("scraper", "", Role.METRICS_READER)
    assert not reader.may(Verb.READ, "Job") and not reader.may(Verb.WRITE, "Job")
    assert not reader.sees_tenant("acme") and not reader.sees_tenant("")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (3600, timedelta(hours=1)),
        ("90", timedelta(seconds=90)),
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("12h", timedelta(hours=12)),
        ("90d", timedelta(days=90)),
        ("3650d", timedelta(days=3650)),
    ],
)
def test_lifetimes(text: str | int, want: timedelta) -> None:
    assert parse_lifetime(text) == want


@pytest.mark.parametrize("text", ["0", "0d", "3651d", "-1", "1w", "1.5h", "", "h", "1 d", 10**12])
def test_bad_lifetimes(text: str | int) -> None:
    with pytest.raises(ValueError):
        parse_lifetime(text)


def test_live_means_not_revoked_and_not_expired() -> None:
    now = datetime(2026, 5, 1, tzinfo=UTC)
    later, earlier = now + timedelta(seconds=1), now - timedelta(seconds=1)
    assert is_live(None, None, now) and is_live(None, later, now)
    assert not is_live(None, now, now) and not is_live(None, earlier, now)
    assert not is_live(earlier, None, now) and not is_live(earlier, later, now)


def test_token_ids_are_public_and_distinct() -> None:
    ids = {new_token_id() for _ in range(100)}
    assert len(ids) == 100 and all(i.startswith(ID_PREFIX) and len(i) <= 32 for i in ids)
