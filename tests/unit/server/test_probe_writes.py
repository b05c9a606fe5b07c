"""An attacker's probe of writes to the kinds added for data, services, pools and FinOps: who
of a tenant may write each (the role table, and kinds only the platform or its controller
write), and that no one writes into another tenant (404: its existence is not told)."""

from __future__ import annotations

import pytest

from aipaas.api.registry import KINDS
from tests.unit.server.api_world import Api

QUEUE = "research"
MANIFESTS = {
    "Secret": "spec: {data: {token: t0p}}",
    "Dataset": 'spec: {source: "s3://bucket/x"}',
    "Budget": "spec: {amount: 100}",
    "Service": f'spec: {{queue: {QUEUE}, template: {{command: ["true"]}}}}',
    "ServiceLoad": "spec: {}",
    "WebhookDelivery": 'spec: {event: budget, url: "https://example.com/h", payload: {}}',
}
CLUSTER = {
    "NodePool": """spec:
  backend: sim
  node: {cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100}}
  maxSize: 4
  lending: {enabled: true, lender: acme, spotPricePerGpuHour: 1.5}""",
    "PriceList": """spec:
  validFrom: 2026-03-01
  gpu: [{model: H100, pricePerHour: 0.01}]
  tenants: [acme]""",
}
# Who of acme may write each kind: 200, else the refusal.
WHO_WRITES = {
    "Secret": {"tad": 200, "alice": 403, "vera": 403},
    "Dataset": {"tad": 200, "alice": 403, "vera": 403},
    "Budget": {"tad": 200, "alice": 403, "vera": 403},
    "Service": {"tad": 200, "alice": 200, "vera": 403},
    "ServiceLoad": {"tad": 403, "alice": 403, "vera": 403},  # the entry point's
    "WebhookDelivery": {"tad": 403, "alice": 403, "vera": 403},  # the controller's
}


def manifest(kind: str, name: str, tenant: str | None) -> str:
    where = f", tenant: {tenant}" if tenant else ""
    body = MANIFESTS.get(kind) or CLUSTER[kind]
    return f"apiVersion: aipaas/v1\nkind: {kind}\nmetadata: {{name: {name}{where}}}\n{body}\n"


@pytest.mark.parametrize("kind", list(WHO_WRITES))
def test_who_of_a_tenant_writes_each_kind(api: Api, kind: str) -> None:
    for who, want in WHO_WRITES[kind].items():
        answer = api.client.post(
            "/api/v1/apply", content=manifest(kind, f"by-{who}", "acme"), headers=api.as_(who)
        )
        assert answer.status_code == want, (who, answer.text)
        if want == 200:
            # Stored where the manifest says, and read back there.
            stored = api.client.get(
                f"/api/v1/{KINDS[kind].plural}/by-{who}", headers=api.as_(who)
            ).json()
            assert stored["metadata"]["tenant"] == "acme"
        if want == 403:
            found = api.client.get(
                f"/api/v1/{KINDS[kind].plural}/by-{who}", headers=api.as_("admin")
            )
            assert found.status_code == 404, found.text


@pytest.mark.parametrize("kind", list(WHO_WRITES))
def test_no_one_writes_into_another_tenant(api: Api, kind: str) -> None:
    for who in ("tad", "alice"):
        answer = api.client.post(
            "/api/v1/apply", content=manifest(kind, f"x-{who}", "globex"), headers=api.as_(who)
        )
        assert answer.status_code == 404, (who, answer.text)
        assert answer.json()["message"] == "tenant globex not found"
    theirs = api.client.get(
        f"/api/v1/{KINDS[kind].plural}", params={"tenant": "globex"}, headers=api.as_("admin")
    )
    assert theirs.status_code == 200
    assert theirs.json()["items"] == []


@pytest.mark.parametrize("kind", list(CLUSTER))
def test_platform_kinds_are_the_platform_admins_alone(api: Api, kind: str) -> None:
    """A node pool lent to acme, or a price list of a cent an hour for acme: acme's own admin
    would pay itself."""
    for who in ("tad", "alice", "vera", "bob"):
        answer = api.client.post(
            "/api/v1/apply", content=manifest(kind, f"by-{who}", None), headers=api.as_(who)
        )
        assert answer.status_code == 403, (who, answer.text)
    answer = api.client.post(
        "/api/v1/apply", content=manifest(kind, "by-admin", None), headers=api.as_("admin")
    )
    assert answer.status_code == 200, answer.text


def test_a_negotiated_price_list_is_seen_by_its_tenant_only(api: Api) -> None:
    made = api.client.post(
        "/api/v1/apply", content=manifest("PriceList", "acme-deal", None), headers=api.as_("admin")
    )
    assert made.status_code == 200, made.text
    assert api.client.get("/api/v1/pricelists/acme-deal", headers=api.as_("alice")).is_success
    assert api.client.get("/api/v1/pricelists/acme-deal", headers=api.as_("bob")).status_code == 404
    listed = api.client.get("/api/v1/pricelists", headers=api.as_("bob")).json()["items"]
    assert "acme-deal" not in [p["metadata"]["name"] for p in listed]
    prices = api.client.get("/api/v1/prices", headers=api.as_("bob")).json()
    assert "acme-deal" not in [p["metadata"]["name"] for p in prices["items"]]
    watched = api.client.get(
        "/api/v1/watch/pricelists", params={"timeoutSeconds": 1}, headers=api.as_("bob")
    )
    assert watched.status_code == 200 and "acme-deal" not in watched.text
