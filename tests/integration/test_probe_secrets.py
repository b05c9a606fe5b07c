"""An attacker's probe of Secrets: their values are written once and never come back from the
API, to anyone, by any road (the answer to the write itself, a read, a list, a watch, events,
the dashboard, an error); another tenant's secret cannot be named, by a Dataset or by a job's
output; a dataset's source cannot read the server's own files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import yaml

from aipaas.api.data import Secret
from aipaas.store import Store
from tests.support.server_process import ADMIN, ServerProcess

VALUE = "wJalrXUtnFEMI-K7MDENG-probe"
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: tad, tenant: acme}
spec: {role: tenant-admin}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: gad, tenant: globex}
spec: {role: tenant-admin}
"""


def secret(tenant: str, value: str, name: str = "creds") -> str:
    return (
        "apiVersion: aipaas/v1\nkind: Secret\n"
        f"metadata: {{name: {name}, tenant: {tenant}}}\n"
        f"spec: {{data: {{accessKeyId: AKIA-{tenant}, secretAccessKey: {value}}}}}\n"
    )


@dataclass
class World:
    server: ServerProcess
    http: httpx.Client
    tokens: dict[str, str]

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data = tmp_path_factory.mktemp("probe-secrets") / "data"
    server = ServerProcess(data, backend="sim").start()
    http = httpx.Client(base_url=server.url, timeout=30)
    try:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        answer = http.post("/api/v1/apply", content=SETUP, headers=admin)
        assert answer.status_code == 200, answer.text
        tokens = {"admin": ADMIN}
        for user, tenant in (("tad", "acme"), ("gad", "globex")):
            made = http.post("/api/v1/tokens", json={"user": user, "tenant": tenant}, headers=admin)
            assert made.status_code == 201, made.text
            tokens[user] = made.json()["token"]
        yield World(server, http, tokens)
    finally:
        http.close()
        server.stop()


def test_the_answer_to_a_write_shows_no_value(world: World) -> None:
    """Created, changed, unchanged, replaced: the answer says what was stored, not the value
    (it ends up in terminals, CI logs and proxies' logs)."""
    for value, action in ((VALUE, "created"), (VALUE + "2", "configured"), (VALUE + "2", None)):
        answer = world.http.post(
            "/api/v1/apply", content=secret("globex", value, "written"), headers=world.auth("gad")
        )
        assert answer.status_code == 200, answer.text
        assert VALUE not in answer.text and "AKIA-globex" not in answer.text
        item = answer.json()["items"][0]
        assert action is None or item["action"] == action
        assert item["object"]["spec"]["data"] == {"accessKeyId": "***", "secretAccessKey": "***"}
    stored = world.http.get("/api/v1/secrets/written", headers=world.auth("gad")).json()
    stored["spec"] = {"data": {"secretAccessKey": VALUE + "3"}}
    answer = world.http.put("/api/v1/secrets/written", json=stored, headers=world.auth("gad"))
    assert answer.status_code == 200, answer.text
    assert VALUE not in answer.text
    assert answer.json()["spec"]["data"] == {"secretAccessKey": "***"}


def test_no_read_shows_a_value_not_even_to_the_platform_admin(world: World) -> None:
    made = world.http.post(
        "/api/v1/apply", content=secret("globex", VALUE, "readme"), headers=world.auth("gad")
    )
    assert made.status_code == 200, made.text
    watch = {"timeoutSeconds": "1"}
    for who in ("gad", "admin"):
        scope = {"tenant": "globex"}
        reads = [
            ("/api/v1/secrets/readme", scope),
            ("/api/v1/secrets", scope),
            ("/api/v1/events", scope),
            ("/api/v1/dashboard/events", {**scope, "limit": "1000"}),
            ("/api/v1/watch/secrets", {**scope, **watch}),
            ("/api/v1/watch/secrets", {**scope, **watch, "name": "readme"}),
            ("/api/v1/watch/events", {**scope, **watch}),
        ]
        for path, params in reads:
            answer = world.http.get(path, params=params, headers=world.auth(who))
            assert answer.status_code == 200, (who, path, answer.text)
            assert VALUE not in answer.text, (who, path)
            assert "AKIA-globex" not in answer.text, (who, path)
    listed = world.http.get(
        "/api/v1/secrets", params={"tenant": "globex"}, headers=world.auth("gad")
    )
    assert {"accessKeyId": "***", "secretAccessKey": "***"} in [
        item["spec"]["data"] for item in listed.json()["items"]
    ]


def test_another_tenants_secret_and_dataset_cannot_be_named(world: World) -> None:
    made = world.http.post(
        "/api/v1/apply", content=secret("globex", VALUE, "theirs"), headers=world.auth("gad")
    )
    assert made.status_code == 200, made.text
    steal = (
        "apiVersion: aipaas/v1\nkind: Dataset\nmetadata: {name: steal, tenant: acme}\n"
        'spec: {source: "s3://bucket/x", secretRef: theirs}\n'
    )
    answer = world.http.post("/api/v1/apply", content=steal, headers=world.auth("tad"))
    assert answer.status_code == 422
    assert answer.json()["fields"][0]["path"] == "spec.secretRef"
    assert "does not exist in tenant acme" in answer.text
    job = (
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: exfil, tenant: acme}\n"
        'spec:\n  queue: research\n  tasks: [{name: w, command: ["true"]}]\n'
        '  outputs: [{path: /out, destination: "s3://mine/x", secretRef: theirs}]\n'
    )
    answer = world.http.post("/api/v1/apply", content=job, headers=world.auth("tad"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["fields"][0]["path"] == "spec.outputs[0].secretRef"
    # Written into their tenant: their tenant is not there for acme.
    answer = world.http.post(
        "/api/v1/apply",
        content=steal.replace("tenant: acme", "tenant: globex"),
        headers=world.auth("tad"),
    )
    assert answer.status_code == 404 and VALUE not in answer.text


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ("http://169.254.169.254/latest/meta-data/", "spec.source"),
        ("local:///etc/passwd", "spec.source"),
        ("zip://etc/passwd::file:///x.zip", "spec.source"),
        ("file://etc/passwd", "spec.source"),
        ("/etc/passwd", "spec.source"),
        ("memory://anything", "spec.source"),
        ("generic://file/etc/passwd", "spec.source"),
        ("asyncwrapper:///etc/passwd", "spec.source"),
    ],
)
def test_a_dataset_source_that_reads_the_servers_own_disks_is_refused(
    world: World, source: str, field: str
) -> None:
    text = (
        "apiVersion: aipaas/v1\nkind: Dataset\nmetadata: {name: local, tenant: acme}\n"
        f"spec: {{source: {json.dumps(source)}}}\n"
    )
    answer = world.http.post("/api/v1/apply", content=text, headers=world.auth("tad"))
    assert answer.status_code == 422, answer.text
    assert [f["path"] for f in answer.json()["fields"]] == [field]


def test_a_malformed_secret_is_refused_without_repeating_its_value(world: World) -> None:
    head = "apiVersion: aipaas/v1\nkind: Secret\nmetadata: {name: bad, tenant: globex}\n"
    for spec, field in [
        (f"spec: {{data: {{k: [{VALUE}]}}}}", "spec.data.k"),
        (f"spec: {{data: {VALUE}}}", "spec.data"),
        (f"spec: {{dta: {{k: {VALUE}}}}}", "spec.dta"),
        (f'spec: {{data: {{"bad key": {VALUE}}}}}', "spec.data"),
        (f"spec: {{data: {{k: {VALUE * 700}}}}}", "spec.data"),
    ]:
        answer = world.http.post("/api/v1/apply", content=head + spec, headers=world.auth("gad"))
        assert answer.status_code == 422, answer.text
        assert VALUE not in answer.text
        assert [f["path"] for f in answer.json()["fields"]] == [field]


def _stored_values(world: World, tenant: str, name: str) -> dict[str, str]:
    store = Store.open(f"sqlite:///{world.server.data_dir / 'aipaas.db'}")
    try:
        found = store.get("Secret", tenant, name)
        assert isinstance(found, Secret)
        return dict(found.spec.data)
    finally:
        store.close()


def test_a_secret_read_and_applied_back_keeps_its_values(world: World) -> None:
    """A read shows ``***`` for each value; writing that read back (apply of its YAML, or a
    PUT of its JSON) must not store ``***`` in place of the values."""
    made = world.http.post(
        "/api/v1/apply", content=secret("globex", VALUE, "roundtrip"), headers=world.auth("gad")
    )
    assert made.status_code == 200, made.text
    before = _stored_values(world, "globex", "roundtrip")
    assert before["secretAccessKey"] == VALUE
    read = world.http.get("/api/v1/secrets/roundtrip", headers=world.auth("gad")).json()
    read["metadata"]["labels"] = {"team": "a"}
    answer = world.http.post(
        "/api/v1/apply", content=yaml.safe_dump(read), headers=world.auth("gad")
    )
    assert answer.status_code == 200, answer.text
    assert _stored_values(world, "globex", "roundtrip") == before
    read = world.http.get("/api/v1/secrets/roundtrip", headers=world.auth("gad")).json()
    read["spec"]["data"]["secretAccessKey"] = VALUE + "-new"
    answer = world.http.put("/api/v1/secrets/roundtrip", json=read, headers=world.auth("gad"))
    assert answer.status_code == 200, answer.text
    after = _stored_values(world, "globex", "roundtrip")
    assert after == {**before, "secretAccessKey": VALUE + "-new"}


def test_the_hidden_value_mark_for_a_key_with_no_value_is_refused(world: World) -> None:
    text = secret("globex", "'***'", "marked")
    answer = world.http.post("/api/v1/apply", content=text, headers=world.auth("gad"))
    assert answer.status_code == 422, answer.text
    assert "spec.data.secretAccessKey" in answer.text
    missing = world.http.get("/api/v1/secrets/marked", headers=world.auth("gad"))
    assert missing.status_code == 404  # nothing half written
