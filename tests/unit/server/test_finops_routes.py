"""Cost, statements and price views through the API: who may write prices, what each tenant
sees (only its own), and bad input answered with the field at fault."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from aipaas.metering.attribution import attribution
from aipaas.store.ledger import ATTEMPT, LedgerEntry, insert_entries
from tests.unit.server.api_world import Api

PRICES = """apiVersion: aipaas/v1
kind: PriceList
metadata: {name: standard}
spec:
  validFrom: 2026-03-01
  gpu: [{model: H100, pricePerHour: 2.5}]
  cpuCoreHour: 0.1
---
apiVersion: aipaas/v1
kind: PriceList
metadata: {name: globex-deal}
spec:
  tenants: [globex]
  validFrom: 2026-03-01
  gpu: [{model: H100, pricePerHour: 1.0}]
"""
START = datetime(2026, 3, 10, 8, tzinfo=UTC)


def entry(tenant: str, job: str, hours: float, user: str) -> LedgerEntry:
    return LedgerEntry(
        kind=ATTEMPT,
        tenant=tenant,
        queue="research",
        user=user,
        job_name=job,
        job_uid=f"uid-{job}",
        task="w-0",
        attempt=0,
        gpu_model="H100",
        gpu_milli=2000,
        cpu_milli=1000,
        memory_mib=0,
        started_at=START,
        ended_at=START + timedelta(hours=hours),
        gpu_hours=2 * hours,
        cpu_hours=hours,
        memory_gib_hours=0,
        recorded_by="controller",
        recorded_at=START + timedelta(hours=hours),
        reason=attribution("", ""),
        attempt_key=f"uid-{job}/w-0/0",
    )


@pytest.fixture
def priced(api: Api) -> Api:
    answer = api.client.post("/api/v1/apply", content=PRICES, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    with api.store.transaction() as tx:
        insert_entries(
            tx, [entry("acme", "train", 3, "alice"), entry("globex", "secret", 2, "bob")]
        )
    return api


WINDOW = {"since": "2026-03-10", "until": "2026-03-11"}


def test_a_tenant_reads_its_cost_at_its_prices(priced: Api) -> None:
    mine = priced.client.get(
        "/api/v1/cost", params={**WINDOW, "by": "tenant,user,job"}, headers=priced.as_("alice")
    )
    assert mine.status_code == 200, mine.text
    body = mine.json()
    assert [(i["tenant"], i["job"], i["cost"]) for i in body["items"]] == [
        ("acme", "train", pytest.approx(3 * (2 * 2.5 + 0.1)))
    ]
    assert body["total"] == {"USD": pytest.approx(15.3)}
    theirs = priced.client.get(
        "/api/v1/cost", params={**WINDOW, "tenant": "globex"}, headers=priced.as_("bob")
    )
    assert theirs.json()["total"] == {"USD": pytest.approx(2 * 2 * 1.0)}  # their own deal


def test_a_platform_admin_reads_every_tenant(priced: Api) -> None:
    answer = priced.client.get("/api/v1/cost", params=WINDOW, headers=priced.as_("admin"))
    assert [i["tenant"] for i in answer.json()["items"]] == ["acme", "globex"]


@pytest.mark.parametrize("user", ["alice", "vera", "tad"])
def test_another_tenants_cost_statement_and_prices_are_not_found(priced: Api, user: str) -> None:
    headers = priced.as_(user)
    for path, params in (
        ("/api/v1/cost", {**WINDOW, "tenant": "globex"}),
        ("/api/v1/statements/globex", {"month": "2026-03"}),
        ("/api/v1/statements/globex", {"month": "2026-03", "format": "csv"}),
        ("/api/v1/prices", {"tenant": "globex"}),
        ("/api/v1/pricelists/globex-deal", {}),
    ):
        answer = priced.client.get(path, params=params, headers=headers)
        assert answer.status_code == 404, (path, answer.text)
        assert "secret" not in answer.text and "1.0" not in answer.text


def test_a_tenant_sees_the_general_prices_and_its_own_only(priced: Api) -> None:
    listed = priced.client.get("/api/v1/pricelists", headers=priced.as_("alice")).json()
    assert [p["metadata"]["name"] for p in listed["items"]] == ["standard"]
    view = priced.client.get("/api/v1/prices", headers=priced.as_("bob")).json()
    assert view["tenant"] == "globex"
    assert view["inForce"] == "globex-deal"
    assert sorted(p["metadata"]["name"] for p in view["items"]) == ["globex-deal", "standard"]


def test_only_a_platform_admin_writes_prices(priced: Api) -> None:
    text = PRICES.split("---")[0].replace("2.5", "0.01")
    for user in ("tad", "alice"):
        answer = priced.client.post("/api/v1/apply", content=text, headers=priced.as_(user))
        assert answer.status_code == 403, answer.text


def test_the_monthly_statement_in_json_and_csv(priced: Api) -> None:
    body = priced.client.get(
        "/api/v1/statements/acme", params={"month": "2026-03"}, headers=priced.as_("alice")
    ).json()
    assert body["month"] == "2026-03"
    assert [(line["user"], line["cost"]) for line in body["lines"]] == [
        ("alice", pytest.approx(15.3))
    ]
    text = priced.client.get(
        "/api/v1/statements/acme",
        params={"month": "2026-03", "format": "csv"},
        headers=priced.as_("alice"),
    ).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["queue"], r["user"], round(float(r["cost"]), 6)) for r in rows] == [
        ("research", "alice", 15.3),
        ("TOTAL", "", 15.3),
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"by": "colour"}, "by"),
        ({"by": "tenant,tenant"}, "by"),
        ({"by": ","}, "by"),
        ({"since": "last tuesday"}, "since"),
        ({"since": "2026-03-11", "until": "2026-03-10"}, "until"),
        ({"until": "99999999999d"}, "until"),
    ],
)
def test_bad_cost_queries_name_the_field(priced: Api, params: dict[str, str], field: str) -> None:
    answer = priced.client.get("/api/v1/cost", params=params, headers=priced.as_("alice"))
    assert answer.status_code == 422, answer.text
    assert field in answer.text


def test_a_bad_month_is_refused(priced: Api) -> None:
    answer = priced.client.get(
        "/api/v1/statements/acme", params={"month": "2026-13"}, headers=priced.as_("alice")
    )
    assert answer.status_code == 422 and "month" in answer.text


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{validFrom: 2026-03-01, gpu: [{model: H100, pricePerHour: -1}]}", "pricePerHour"),
        ("{validFrom: 2026-03-02, validUntil: 2026-03-01}", "validUntil"),
        ("{validFrom: soon}", "validFrom"),
        ("{validFrom: 2026-03-01, currency: dollars}", "currency"),
        ("{validFrom: 2026-03-01, tierFactors: {spot: .nan}}", "tierFactors"),
        (
            "{validFrom: 2026-03-01, "
            "gpu: [{model: A, pricePerHour: 1}, {model: A, pricePerHour: 2}]}",
            "gpu[1].model",
        ),
    ],
)
def test_bad_price_lists_name_the_field(api: Api, spec: str, field: str) -> None:
    text = f"apiVersion: aipaas/v1\nkind: PriceList\nmetadata: {{name: p}}\nspec: {spec}\n"
    answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("admin"))
    assert answer.status_code == 422, answer.text
    assert field in answer.text


BUDGET = """apiVersion: aipaas/v1
kind: Budget
metadata: {name: b, tenant: TENANT}
spec: SPEC
"""
GOOD = "{queue: research, amount: 100, thresholds: [50, {percent: 100, action: stopAdmission}]}"


def budget(tenant: str = "acme", spec: str = GOOD) -> str:
    return BUDGET.replace("TENANT", tenant).replace("SPEC", spec)


def test_tenant_admins_write_budgets_members_read_them(api: Api) -> None:
    assert (
        api.client.post("/api/v1/apply", content=budget(), headers=api.as_("alice")).status_code
        == 403
    )
    answer = api.client.post("/api/v1/apply", content=budget(), headers=api.as_("tad"))
    assert answer.status_code == 200, answer.text
    read = api.client.get("/api/v1/budgets/b", headers=api.as_("vera"))
    assert read.status_code == 200 and read.json()["spec"]["amount"] == 100
    for who in ("bob",):
        assert (
            api.client.get(
                "/api/v1/budgets/b", params={"tenant": "acme"}, headers=api.as_(who)
            ).status_code
            == 404
        )
    other = api.client.post("/api/v1/apply", content=budget("globex"), headers=api.as_("tad"))
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{queue: nope, amount: 100}", "spec.queue"),
        ("{amount: 0}", "spec.amount"),
        ("{amount: .inf}", "spec.amount"),
        ("{amount: 10, period: yearly}", "spec.period"),
        ("{amount: 10, thresholds: []}", "spec.thresholds"),
        ("{amount: 10, thresholds: [50, 50]}", "spec.thresholds[1].percent"),
        ("{amount: 10, thresholds: [0]}", "spec.thresholds[0].percent"),
        ("{amount: 10, thresholds: [{percent: 90, action: explode}]}", "spec.thresholds[0].action"),
        (
            "{amount: 10, thresholds: [{percent: 90, action: lowerPriority}]}",
            "spec.thresholds[0].action",
        ),
        (
            "{amount: 10, webhook: {url: 'ftp://x/y', secretRef: {name: s, key: k}}}",
            "spec.webhook.url",
        ),
        ("{amount: 10, webhook: {url: 'https://x/y'}}", "spec.webhook.secretRef"),
        ("{amount: 10, currency: usd}", "spec.currency"),
    ],
)
def test_bad_budgets_name_the_field(api: Api, spec: str, field: str) -> None:
    answer = api.client.post("/api/v1/apply", content=budget(spec=spec), headers=api.as_("tad"))
    assert answer.status_code == 422, answer.text
    assert field in answer.text, answer.text


def test_nobody_writes_the_delivery_log(api: Api) -> None:
    text = (
        "apiVersion: aipaas/v1\nkind: WebhookDelivery\nmetadata: {name: d, tenant: acme}\n"
        "spec: {url: 'http://x/', event: BudgetThresholdCrossed}\n"
    )
    for who in ("tad", "admin"):
        assert (
            api.client.post("/api/v1/apply", content=text, headers=api.as_(who)).status_code == 403
        )
