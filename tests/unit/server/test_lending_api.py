"""GET /api/v1/lending: spot GPU-hours on lending pools, charged to borrowers and credited to
lenders; each tenant sees only its own side, a platform admin everything."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aipaas.store.ledger import ATTEMPT, LedgerEntry, insert_entries
from tests.unit.server.api_world import Api

POOL = """
apiVersion: aipaas/v1
kind: NodePool
metadata: {name: lent}
spec:
  backend: sim
  node: {cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100}}
  maxSize: 2
  lending: {enabled: true, lender: acme, spotPricePerGpuHour: 2.5}
"""


def entry(tenant: str, gpu_hours: float, reason: str, key: str) -> LedgerEntry:
    moment = datetime(2026, 1, 5, tzinfo=UTC)
    return LedgerEntry(
        kind=ATTEMPT,
        tenant=tenant,
        queue="q",
        user="u",
        job_name=key,
        job_uid=key,
        task="w-0",
        attempt=0,
        gpu_model="H100",
        gpu_milli=8000,
        cpu_milli=8000,
        memory_mib=1024,
        started_at=moment,
        ended_at=moment,
        gpu_hours=gpu_hours,
        cpu_hours=1.0,
        memory_gib_hours=1.0,
        recorded_by="controller",
        recorded_at=moment,
        attempt_key=f"{key}/w-0/0",
        reason=reason,
    )


@pytest.fixture
def lent(api: Api) -> Api:
    assert api.client.post("/api/v1/apply", content=POOL, headers=api.as_("admin")).is_success
    with api.store.transaction() as tx:
        insert_entries(
            tx,
            [
                entry("globex", 8.0, "pool=lent;tier=spot", "g1"),
                entry("initech", 4.0, "pool=lent;tier=spot", "i1"),
                entry("globex", 3.0, "pool=lent;tier=normal", "g2"),  # not spot: not lent
                entry("acme", 5.0, "pool=lent;tier=spot", "a1"),  # the lender's own
                entry("globex", 2.0, "pool=other;tier=spot", "g3"),  # not a lending pool
            ],
        )
    return api


def test_a_platform_admin_sees_both_sides_of_every_line(lent: Api) -> None:
    answer = lent.client.get("/api/v1/lending", headers=lent.as_("admin")).json()
    lines = {(i["lender"], i["borrower"]): i for i in answer["items"]}
    assert set(lines) == {("acme", "globex"), ("acme", "initech")}
    assert lines[("acme", "globex")]["gpuHours"] == 8.0
    assert lines[("acme", "globex")]["amount"] == pytest.approx(20.0)
    assert answer["balances"] == pytest.approx({"acme": 30.0, "globex": -20.0, "initech": -10.0})


def test_the_lender_sees_its_credit_and_a_borrower_only_its_own_charge(lent: Api) -> None:
    lender = lent.client.get("/api/v1/lending", headers=lent.as_("alice")).json()
    assert lender["balances"] == pytest.approx({"acme": 30.0})
    borrower = lent.client.get("/api/v1/lending", headers=lent.as_("bob")).json()
    assert [(i["lender"], i["borrower"]) for i in borrower["items"]] == [("acme", "globex")]
    assert borrower["balances"] == pytest.approx({"globex": -20.0})  # not initech's
    assert "initech" not in str(borrower)


def test_no_token_no_lending(lent: Api) -> None:
    assert lent.client.get("/api/v1/lending").status_code == 401
