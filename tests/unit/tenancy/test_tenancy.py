"""Roles and tokens: the pure rules under the API's checks."""

from __future__ import annotations

import pytest

from aipaas.api.tenancy import Role
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.tokens import PREFIX, hash_token, new_token


class TestRoles:
    @pytest.mark.parametrize(
        ("role", "want_writable"),
        [
            pytest.param(
                Role.PLATFORM_ADMIN,
                {"Tenant", "User", "Queue", "Job", "Token"},
                id="platform admin writes everything",
            ),
            pytest.param(
                Role.TENANT_ADMIN,
                {"User", "Queue", "Job", "Token"},
                id="tenant admin: all but tenants",
            ),
            pytest.param(Role.MEMBER, {"Job"}, id="member: jobs"),
            pytest.param(Role.VIEWER, set(), id="viewer: nothing"),
        ],
    )
    def test_writes_by_role(self, role: Role, want_writable: set[str]) -> None:
        caller = Principal("u", "acme", role)
        kinds = {"Tenant", "User", "Queue", "Job", "Token", "Node"}
        assert {k for k in kinds if caller.may(Verb.WRITE, k)} == want_writable
        assert all(caller.may(Verb.READ, k) for k in kinds)

    def test_visibility(self) -> None:
        member = Principal("u", "acme", Role.MEMBER)
        assert member.sees_tenant("acme") and not member.sees_tenant("globex")
        assert Principal("a", "", Role.PLATFORM_ADMIN).sees_tenant("globex")


class TestTokens:
    def test_tokens_are_random_and_hashed(self) -> None:
        first, second = new_token(), new_token()
        assert first != second and first.startswith(PREFIX) and len(first) > 40
        assert hash_token(first) == hash_token(first) != hash_token(second)
        assert first not in hash_token(first)
