"""DeviceClass, ResourceSlice, ResourceClaim and ResourceClaimTemplate through the API."""

from __future__ import annotations

from pathlib import Path

from aipaas.api.dra import ClaimStatus
from tests.unit.server.api_world import Api

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
SLICE = """apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-1-gpu}
spec:
  driver: gpu.nvidia.com
  nodeName: node-1
  pool: {name: node-1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes:
      type: {string: gpu}
"""
CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two-gpus}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""


def test_admin_applies_classes_and_slices(api: Api) -> None:
    classes = (EXAMPLES / "nvidia-classes.yaml").read_text()
    answer = api.client.post("/api/v1/apply", content=classes, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    assert {i["name"] for i in answer.json()["items"]} >= {"gpu.nvidia.com", "mig.nvidia.com"}
    answer = api.client.post("/api/v1/apply", content=SLICE, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    listed = api.client.get("/api/v1/resourceslices", headers=api.as_("alice")).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["node-1-gpu"]
    got = api.client.get("/api/v1/deviceclasses/gpu.nvidia.com", headers=api.as_("alice"))
    assert got.status_code == 200
    assert got.json()["apiVersion"] == "resource.k8s.io/v1"
    assert "device.driver" in got.json()["spec"]["selectors"][0]["cel"]["expression"]


def test_members_may_not_write_slices_or_classes(api: Api) -> None:
    classes = (EXAMPLES / "deviceclass.yaml").read_text()
    for user in ("alice", "tad"):
        for manifest in (SLICE, classes):
            answer = api.client.post("/api/v1/apply", content=manifest, headers=api.as_(user))
            assert answer.status_code == 403, answer.text
    assert api.client.get("/api/v1/resourceslices", headers=api.as_("admin")).json()["items"] == []


def test_member_applies_a_claim_in_own_tenant(api: Api) -> None:
    answer = api.client.post("/api/v1/apply", content=CLAIM, headers=api.as_("alice"))
    assert answer.status_code == 200, answer.text
    item = answer.json()["items"][0]
    assert (item["kind"], item["name"], item["action"]) == ("ResourceClaim", "two-gpus", "created")
    assert item["object"]["metadata"]["tenant"] == "acme"
    again = api.client.post("/api/v1/apply", content=CLAIM, headers=api.as_("alice"))
    assert again.json()["items"][0]["action"] == "unchanged"
    got = api.client.get("/api/v1/claims/two-gpus", headers=api.as_("alice"))
    assert got.json()["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    # Another tenant does not see it.
    assert (
        api.client.get("/api/v1/resourceclaims/two-gpus", headers=api.as_("bob")).status_code == 404
    )


def test_documentation_claim_and_template_load(api: Api) -> None:
    for name in ("resourceclaim.yaml", "resourceclaimtemplate.yaml"):
        text = (EXAMPLES / name).read_text()
        answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("alice"))
        assert answer.status_code == 200, answer.text


def test_a_bad_selector_names_object_field_and_reason(api: Api) -> None:
    bad = CLAIM.replace(
        "exactly: {deviceClassName: gpu.nvidia.com, count: 2}",
        "exactly:\n        deviceClassName: gpu.nvidia.com\n"
        "        selectors: [{cel: {expression: 'device.driver == '}}]",
    )
    answer = api.client.post("/api/v1/apply", content=bad, headers=api.as_("alice"))
    assert answer.status_code == 422, answer.text
    message = answer.json()["message"]
    assert "two-gpus" in message
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in message


def test_a_bad_count_is_422(api: Api) -> None:
    bad = CLAIM.replace("count: 2", "count: 0")
    answer = api.client.post("/api/v1/apply", content=bad, headers=api.as_("alice"))
    assert answer.status_code == 422, answer.text
    assert "count" in answer.json()["message"] and "two-gpus" in answer.json()["message"]


def test_a_slice_with_a_tenant_is_refused(api: Api) -> None:
    bad = SLICE.replace("metadata: {name: node-1-gpu}", "metadata: {name: s, tenant: acme}")
    answer = api.client.post("/api/v1/apply", content=bad, headers=api.as_("admin"))
    assert answer.status_code == 422, answer.text
    assert "metadata.tenant" in answer.json()["message"]


def test_devices_show_holders_only_to_their_tenant(api: Api) -> None:
    api.client.post("/api/v1/apply", content=SLICE, headers=api.as_("admin"))
    api.client.post("/api/v1/apply", content=CLAIM, headers=api.as_("alice"))
    stored = api.store.get("ResourceClaim", "acme", "two-gpus")
    allocation = {
        "devices": {
            "results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"}
            ]
        }
    }
    api.store.update_status(stored, ClaimStatus(allocation=allocation))
    mine = api.client.get("/api/v1/devices", headers=api.as_("alice")).json()["items"]
    assert [(d["node"], d["device"], d["state"], d["holders"]) for d in mine] == [
        ("node-1", "gpu-0", "Allocated", ["acme/two-gpus"])
    ]
    assert mine[0]["attributes"] == {"gpu.nvidia.com/type": "gpu"}
    theirs = api.client.get("/api/v1/devices", headers=api.as_("bob")).json()["items"]
    assert theirs[0]["holders"] == ["(another tenant)"]
    assert api.client.get("/api/v1/devices").status_code == 401
