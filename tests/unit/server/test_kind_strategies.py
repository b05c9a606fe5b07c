"""The registry of each kind's rules (server/strategies/): which kinds have rules of their
own, who writes each kind, and what a read shows. The rules themselves are tested through the
API (test_api.py, test_who_may_say_what.py, test_queue_tree_submission.py and the others)."""

from __future__ import annotations

import pytest

from aipaas.api.data import REDACTED, Secret, SecretSpec
from aipaas.api.meta import ObjectMeta
from aipaas.api.registry import KINDS
from aipaas.server.strategies import registered_kinds, shown, strategy_for
from aipaas.server.strategies.base import KindStrategy, WrittenBy


class TestRegistry:
    def test_every_registered_kind_exists(self) -> None:
        assert registered_kinds() <= set(KINDS)

    def test_a_kind_without_rules_of_its_own_gets_the_plain_ones(self) -> None:
        plain = set(KINDS) - registered_kinds()
        assert plain, "some kinds follow the plain rules"
        for kind in plain:
            assert type(strategy_for(kind)) is KindStrategy
            assert strategy_for(kind).written_by is WrittenBy.ROLES

    @pytest.mark.parametrize(
        ("kind", "want_written_by"),
        [
            pytest.param("Node", WrittenBy.BACKENDS, id="nodes are reported"),
            pytest.param("WebhookDelivery", WrittenBy.BACKENDS, id="deliveries are reported"),
            pytest.param("ServiceLoad", WrittenBy.BACKENDS, id="loads are reported"),
            pytest.param("PriorityClass", WrittenBy.PLATFORM_ADMIN, id="priority classes"),
            pytest.param("NodePool", WrittenBy.PLATFORM_ADMIN, id="node pools"),
            pytest.param("PriceList", WrittenBy.PLATFORM_ADMIN, id="price lists"),
            pytest.param("Job", WrittenBy.ROLES, id="jobs by the role table"),
            pytest.param("Tenant", WrittenBy.ROLES, id="tenants by the role table"),
        ],
    )
    def test_who_writes_each_kind(self, kind: str, want_written_by: WrittenBy) -> None:
        assert strategy_for(kind).written_by is want_written_by

    def test_writing_users_and_tenants_changes_identity(self) -> None:
        changing = {kind for kind in KINDS if strategy_for(kind).changes_identity}
        assert changing == {"User", "Tenant"}

    def test_reads_that_may_hide_objects(self) -> None:
        hiding = {kind for kind in KINDS if strategy_for(kind).hides_some}
        assert hiding == {"Tenant", "PriceList"}


class TestShown:
    def test_a_secret_shows_its_keys_never_its_values(self) -> None:
        secret = Secret(
            metadata=ObjectMeta(name="s3", tenant="acme"),
            spec=SecretSpec(data={"accessKeyId": "AKIA", "secretAccessKey": "hidden"}),
        )
        assert shown(secret).spec.data == {"accessKeyId": REDACTED, "secretAccessKey": REDACTED}
        assert secret.spec.data["secretAccessKey"] == "hidden"  # the stored one is untouched
