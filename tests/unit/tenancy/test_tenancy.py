"""Roles, tokens and quota arithmetic: the pure rules under the API's checks."""

from __future__ import annotations

import pytest

from aipaas.api.resources import Quota
from aipaas.api.tenancy import Role
from aipaas.tenancy.principal import Principal, Verb
from aipaas.tenancy.quota import Usage, exceeded
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


class TestQuota:
    @pytest.mark.parametrize(
        ("quota", "used", "wanted", "want"),
        [
            pytest.param(
                Quota(gpu=8),
                Usage(gpu_milli=6000),
                Usage(gpu_milli=2000),
                None,
                id="exactly full fits",
            ),
            pytest.param(
                Quota(gpu=8),
                Usage(gpu_milli=6000),
                Usage(gpu_milli=4000),
                "gpu: needs 4, 6 of 8 in use",
                id="gpus over",
            ),
            pytest.param(
                Quota(gpu=1),
                Usage(gpu_milli=500),
                Usage(gpu_milli=750),
                "gpu: needs 0.75, 0.5 of 1 in use",
                id="fractions",
            ),
            pytest.param(
                Quota(cpu="2"),
                Usage(cpu_milli=1500),
                Usage(cpu_milli=1000),
                "cpu: needs 1, 1.5 of 2 in use",
                id="cpu over",
            ),
            pytest.param(
                Quota(memory="1Gi"),
                Usage(),
                Usage(memory_mib=2048),
                "memory: needs 2048Mi, 0Mi of 1024Mi in use",
                id="memory over",
            ),
            pytest.param(
                Quota(),
                Usage(gpu_milli=10**9),
                Usage(gpu_milli=10**9),
                None,
                id="no quota, no bound",
            ),
            pytest.param(
                Quota(gpu=0),
                Usage(),
                Usage(cpu_milli=1000),
                None,
                id="zero GPUs still allows CPU work",
            ),
        ],
    )
    def test_exceeded(self, quota: Quota, used: Usage, wanted: Usage, want: str | None) -> None:
        assert exceeded(quota, used, wanted) == want
