"""A dataset never reads from the cloud metadata address, whatever road leads there, on a real
server with the local backend (the node's copier does the reading): a redirect after the
first URL, a proxy set in the dataset's Secret, a WebHDFS namenode sending the reader on to a
"datanode", and addresses written in other forms (IPv4-mapped IPv6, the old IPv4 forms)
through any protocol (ftp://, webhdfs://)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.dataset_site import DatasetSite
from tests.support.server_process import ServerProcess


@pytest.fixture(scope="module")
def site() -> Iterator[DatasetSite]:
    made = DatasetSite()
    yield made
    made.close()


def dataset(name: str, source: str, secret: str | None = None, endpoint: str = "") -> str:
    spec = f"source: {source!r}"
    if secret:
        spec += f", secretRef: {secret}"
    if endpoint:
        spec += f", endpoint: {endpoint!r}"
    return (
        "apiVersion: aipaas/v1\nkind: Dataset\n"
        f"metadata: {{name: {name}, tenant: acme}}\nspec: {{{spec}}}\n"
    )


def secret(name: str, data: str) -> str:
    return (
        "apiVersion: aipaas/v1\nkind: Secret\n"
        f"metadata: {{name: {name}, tenant: acme}}\nspec: {{data: {data}}}\n"
    )


def apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        answer = client.post("/apply", content=text)
        assert answer.status_code == 200, answer.text


def warm_until_settled(server: ServerProcess, name: str, timeout: float = 90) -> dict[str, Any]:
    """Warm the dataset on its node and wait until the load failed or the data is cached."""
    with server.http() as client:
        answer = client.post(f"/datasets/{name}/warm", params={"tenant": "acme"}, json={})
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = client.get(f"/datasets/{name}", params={"tenant": "acme"}).json()
            status: dict[str, Any] = found.get("status") or {}
            if status.get("phase") in ("Failed", "Cached"):
                return status
            time.sleep(0.3)
    raise AssertionError(f"dataset {name} never settled: {status}")


def test_a_redirect_to_the_metadata_address_is_refused_at_the_hop(
    tenant_server: ServerProcess, site: DatasetSite
) -> None:
    apply(tenant_server, dataset("hop", f"{site.url}/redirect/"))
    status = warm_until_settled(tenant_server, "hop")
    assert status["phase"] == "Failed", status
    assert "169.254.169.254" in status["message"], status
    assert "not a dataset location" in status["message"], status
    assert site.paths("/redirect/"), "the first URL was read"


def test_a_proxy_in_the_secret_is_refused_and_never_used(
    tenant_server: ServerProcess, site: DatasetSite
) -> None:
    apply(tenant_server, secret("via", "{note: plain}"))
    apply(tenant_server, dataset("proxied", f"{site.url}/data/", secret="via"))
    # The Secret changes after the dataset was accepted: the node still refuses the proxy.
    apply(tenant_server, secret("via", f"{{proxy: {site.url}}}"))
    status = warm_until_settled(tenant_server, "proxied")
    assert status["phase"] == "Failed", status
    assert "proxy is not allowed" in status["message"], status
    assert site.proxied == [], "no read went through the proxy"
    # A dataset naming a Secret that sets a proxy is refused when applied, naming the field.
    with tenant_server.http() as client:
        answer = client.post("/apply", content=dataset("proxied-2", f"{site.url}/data/", "via"))
    assert answer.status_code == 422, answer.text
    assert "spec.secretRef" in answer.text and "proxy" in answer.text, answer.text


def test_a_webhdfs_namenode_cannot_send_the_reader_to_the_metadata_address(
    tenant_server: ServerProcess, site: DatasetSite
) -> None:
    apply(tenant_server, dataset("hdfs-hop", f"webhdfs://127.0.0.1:{site.port}/data"))
    status = warm_until_settled(tenant_server, "hdfs-hop")
    assert status["phase"] == "Failed", status
    assert "169.254.169.254" in status["message"], status
    assert "not a dataset location" in status["message"], status
    assert any("op=OPEN" in path for path in site.paths("/webhdfs/")), "the namenode was asked"


@pytest.mark.parametrize(
    ("source", "endpoint", "field"),
    [
        ("http://[::ffff:169.254.169.254]/latest/", "", "spec.source"),
        ("http://[0:0:0:0:0:ffff:a9fe:a9fe]/latest/", "", "spec.source"),
        ("http://[fd00:ec2:0:0:0:0:0:254]/latest/", "", "spec.source"),
        ("https://[2002:a9fe:a9fe:0:0:0:0:1]/latest/", "", "spec.source"),
        ("ftp://2852039166/pub", "", "spec.source"),
        ("ftp://169.254.169.254/pub", "", "spec.source"),
        ("webhdfs://0xa9fea9fe:9870/data", "", "spec.source"),
        ("s3://bucket/data", "http://[0:0:0:0:0:ffff:a9fe:a9fe]/", "spec.endpoint"),
        ("hdfs://namenode:8020/data", "", "spec.source"),
    ],
)
def test_addresses_in_other_forms_and_unchecked_protocols_are_refused_when_applied(
    tenant_server: ServerProcess, source: str, endpoint: str, field: str
) -> None:
    with tenant_server.http() as client:
        answer = client.post("/apply", content=dataset("written", source, endpoint=endpoint))
    assert answer.status_code == 422, answer.text
    assert field in answer.text, answer.text
