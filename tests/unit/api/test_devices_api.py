# ruff: noqa: E501  (expected messages are kept whole, one per line)
"""resource.k8s.io/v1 objects: Kubernetes documentation manifests load, validate, round-trip;
bad input is refused with the object, the field path and the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aipaas.api.devices import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    dump_device_object,
    load_device_documents,
    parse_device_object,
)
from aipaas.errors import InvalidObject

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"

RESOURCE_SLICE = """
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: cat-slice
spec:
  driver: "resource-driver.example.com"
  pool:
    generation: 1
    name: "black-cat-pool"
    resourceSliceCount: 1
  nodeName: worker-1
  devices:
  - name: "large-black-cat"
    attributes:
      color:
        string: "black"
      size:
        string: "large"
      cat:
        bool: true
      driverVersion:
        version: "1.2.3"
    capacity:
      memory:
        value: 8Gi
"""

PARTITIONABLE = """
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: gpu-partitions
spec:
  driver: gpu.example.com
  nodeName: node-1
  pool: {name: node-1}
  sharedCounters:
  - name: gpu-0-counters
    counters:
      memory: {value: 80Gi}
  devices:
  - name: gpu-0
    consumesCounters:
    - counterSet: gpu-0-counters
      counters: {memory: {value: 80Gi}}
  - name: gpu-0-half-0
    consumesCounters:
    - counterSet: gpu-0-counters
      counters: {memory: {value: 40Gi}}
"""


def documents(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


class TestKubernetesExamples:
    @pytest.mark.parametrize(
        ("file", "kind"),
        [
            pytest.param("deviceclass.yaml", DeviceClass, id="DeviceClass"),
            pytest.param("resourceclaim.yaml", ResourceClaim, id="ResourceClaim"),
            pytest.param("resourceclaimtemplate.yaml", ResourceClaimTemplate, id="template"),
            pytest.param("prioritized-list.yaml", ResourceClaimTemplate, id="firstAvailable"),
            pytest.param("admin-access.yaml", ResourceClaimTemplate, id="adminAccess"),
        ],
    )
    def test_loads_and_round_trips(self, file: str, kind: type) -> None:
        (document,) = documents(file)
        obj = parse_device_object(document)
        assert isinstance(obj, kind)
        assert dump_device_object(obj) == document
        assert parse_device_object(dump_device_object(obj)) == obj

    @pytest.mark.parametrize("text", [RESOURCE_SLICE, PARTITIONABLE], ids=["slice", "counters"])
    def test_slices_round_trip(self, text: str) -> None:
        document = yaml.safe_load(text)
        obj = parse_device_object(document)
        assert isinstance(obj, ResourceSlice)
        assert dump_device_object(obj) == document

    @pytest.mark.parametrize("file", ["consumable-capacity.yaml", "partitionable.yaml",
                                      "nvidia-classes.yaml", "whatif-h100.yaml"])  # fmt: skip
    def test_multi_document_examples_round_trip(self, file: str) -> None:
        for document in documents(file):
            assert dump_device_object(parse_device_object(document)) == document

    def test_whatif_example_loads(self) -> None:
        objects = load_device_documents((EXAMPLES / "whatif-h100.yaml").read_text())
        assert [o.kind for o in objects].count("ResourceSlice") == 1
        assert [o.kind for o in objects].count("ResourceClaim") == 2


def claim_with(request: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [request], **devices}},
    }


class TestRefusals:
    @pytest.mark.parametrize(
        ("document", "message"),
        [
            pytest.param(
                claim_with({"name": "g", "exactly": {"deviceClassName": "x", "count": 0}}),
                'ResourceClaim "c": spec.devices.requests[0].exactly.count: '
                "Input should be greater than or equal to 1",
                id="count zero",
            ),
            pytest.param(
                claim_with({"name": "g"}),
                'ResourceClaim "c": spec.devices.requests[0]: exactly one of exactly or '
                "firstAvailable must be set",
                id="neither exactly nor firstAvailable",
            ),
            pytest.param(
                claim_with(
                    {
                        "name": "g",
                        "exactly": {"deviceClassName": "x", "allocationMode": "All", "count": 2},
                    }
                ),
                "spec.devices.requests[0].exactly: count must not be set when allocationMode is All",
                id="count with All",
            ),
            pytest.param(
                claim_with(
                    {
                        "name": "g",
                        "exactly": {
                            "deviceClassName": "x",
                            "selectors": [
                                {"cel": {"expression": 'device.driver == "a" && gpu == 1'}}
                            ],
                        },
                    }
                ),
                "spec.devices.requests[0].exactly.selectors[0].cel.expression: CEL line 1, "
                "column 25: undeclared reference to 'gpu'",
                id="CEL error with position",
            ),
            pytest.param(
                claim_with(
                    {"name": "g", "exactly": {"deviceClassName": "x"}},
                    constraints=[{"requests": ["h"], "matchAttribute": "a.com/x"}],
                ),
                "spec.devices: constraints[0].requests: 'h' is not a request of this claim",
                id="constraint names an unknown request",
            ),
            pytest.param(
                claim_with(
                    {"name": "g", "exactly": {"deviceClassName": "x"}},
                    constraints=[{"matchAttribute": "numaNode"}],
                ),
                "spec.devices.constraints[0].matchAttribute: 'numaNode' must be fully qualified",
                id="matchAttribute needs a domain",
            ),
            pytest.param(
                claim_with(
                    {
                        "name": "g",
                        "exactly": {
                            "deviceClassName": "x",
                            "capacity": {"requests": {"memory": "lots"}},
                        },
                    }
                ),
                "spec.devices.requests[0].exactly.capacity.requests.memory: invalid quantity 'lots'",
                id="bad capacity quantity",
            ),
            pytest.param(
                claim_with({"name": "g", "exactly": {"deviceClassName": "x", "colour": "red"}}),
                "spec.devices.requests[0].exactly.colour: unknown field",
                id="unknown field",
            ),
            pytest.param(
                {**yaml.safe_load(RESOURCE_SLICE), "apiVersion": "resource.k8s.io/v1beta1"},
                "ResourceSlice \"cat-slice\": apiVersion: must be 'resource.k8s.io/v1'",
                id="old apiVersion",
            ),
            pytest.param(
                {"apiVersion": "resource.k8s.io/v1", "kind": "Pod", "metadata": {"name": "p"}},
                "kind: kind must be one of DeviceClass, ResourceSlice, ResourceClaim",
                id="unknown kind",
            ),
        ],
    )
    def test_refuses(self, document: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidObject) as caught:
            parse_device_object(document)
        assert message in str(caught.value)

    @pytest.mark.parametrize(
        ("patch", "message"),
        [
            pytest.param(
                {"nodeName": None}, "exactly one of nodeName, nodeSelector, allNodes", id="no node"
            ),
            pytest.param(
                {"allNodes": True},
                "exactly one of nodeName, nodeSelector, allNodes",
                id="two placements",
            ),
            pytest.param(
                {"devices": [{"name": "a"}, {"name": "a"}]},
                "spec: devices: duplicate device name 'a'",
                id="duplicate device",
            ),
            pytest.param(
                {"devices": [{"name": "a", "attributes": {"x": {"int": 1, "string": "1"}}}]},
                "spec.devices[0].attributes.x: exactly one of int, bool, string or version",
                id="attribute with two types",
            ),
            pytest.param(
                {"devices": [{"name": "a", "attributes": {"v": {"version": "1.2"}}}]},
                "'1.2' is not a semantic version",
                id="bad version",
            ),
            pytest.param(
                {"devices": [{"name": "A"}]},
                "spec.devices[0].name: 'A' is not a DNS label",
                id="bad device name",
            ),
        ],
    )
    def test_refuses_slices(self, patch: dict[str, Any], message: str) -> None:
        document = yaml.safe_load(RESOURCE_SLICE)
        document["spec"].update(patch)
        document["spec"] = {k: v for k, v in document["spec"].items() if v is not None}
        with pytest.raises(InvalidObject) as caught:
            parse_device_object(document)
        assert message in str(caught.value)

    def test_bad_yaml_names_the_source(self) -> None:
        with pytest.raises(InvalidObject, match=r"claims\.yaml"):
            load_device_documents("a: [", source="claims.yaml")

    def test_document_number_in_the_message(self) -> None:
        text = (EXAMPLES / "deviceclass.yaml").read_text() + "---\nkind: Pod\n"
        with pytest.raises(InvalidObject, match=r"x\.yaml document 2: Pod: kind"):
            load_device_documents(text, source="x.yaml")
