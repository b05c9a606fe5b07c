"""Extended resources in a task's ``resources`` as the API reads them: a qualified name with a
whole count, as Kubernetes validates a pod's extended resource requests (``IsExtendedResourceName``
and "must be an integer"), plus the DRA implicit name ``deviceclass.resource.kubernetes.io/<class>``
(KEP-5004). Bad input is refused at the API with one line naming the field; the job read back
and applied again is the same job. Answers worked by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from aipaas.api.job import Job
from aipaas.api.resources import TaskResources
from aipaas.api.tenancy import Role
from aipaas.errors import InvalidObject
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.tenancy.principal import Principal

SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""


def job_text(resources: str, name: str = "ext") -> str:
    return (
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: acme}}\n"
        "spec:\n  queue: research\n  tasks:\n  - name: worker\n    command: [train]\n"
        f"    resources: {resources}\n"
    )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ObjectService]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    made = ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN))
    made.apply_text(SETUP)
    yield made
    store.close()


class TestAccepted:
    @pytest.mark.parametrize(
        ("written", "want"),
        [
            pytest.param(
                {"example.com/fpga": 2},
                {"example.com/fpga": 2},
                id="a vendor's qualified name with a whole count (a pod's example.com/dongle: 3)",
            ),
            pytest.param(
                {"deviceclass.resource.kubernetes.io/fpga": 1},
                {"deviceclass.resource.kubernetes.io/fpga": 1},
                id="the implicit name of a DeviceClass (KEP-5004)",
            ),
            pytest.param(
                {"example.com/fpga": "3"},
                {"example.com/fpga": 3},
                id="a quantity string of a whole number, as a pod may write it",
            ),
            pytest.param(
                {"example.com/fpga": 2.0},
                {"example.com/fpga": 2},
                id="a float that is a whole number",
            ),
            pytest.param(
                {"example.com/fpga": 0},
                {"example.com/fpga": 0},
                id="zero: accepted, asks no device (a pod's request of 0)",
            ),
        ],
    )
    def test_parsed_counts(self, written: dict[str, object], want: dict[str, int]) -> None:
        assert TaskResources.model_validate({"cpu": 1, **written}).extended == want

    def test_zero_asks_no_device(self) -> None:
        parsed = TaskResources.model_validate({"example.com/fpga": 0, "example.com/nic": 1})
        assert parsed.extended_asked() == {"example.com/nic": 1}

    def test_nvidia_gpu_stays_the_gpu_count(self) -> None:
        parsed = TaskResources.model_validate({"nvidia.com/gpu": 2})
        assert (parsed.gpu is not None and parsed.gpu.count, parsed.extended) == (2, {})


class TestRefused:
    @pytest.mark.parametrize(
        ("resources", "want"),
        [
            pytest.param(
                "{cpu: 1, example.com/fpga: 0.5}",
                "spec.tasks[0].resources[example.com/fpga]: must be a whole number, got 0.5",
                id="a fraction (Kubernetes: extended resources must be integers)",
            ),
            pytest.param(
                "{cpu: 1, example.com/fpga: -1}",
                "spec.tasks[0].resources[example.com/fpga]: must not be negative, got -1",
                id="a negative count",
            ),
            pytest.param(
                "{cpu: 1, example.com/fpga: 65}",
                "spec.tasks[0].resources[example.com/fpga]: must be at most 64 devices, got 65",
                id="more devices than a DRA request may ask (64)",
            ),
            pytest.param(
                "{cpu: 1, example.com/fpga: true}",
                "spec.tasks[0].resources[example.com/fpga]: must be a whole number, got True",
                id="a boolean",
            ),
            pytest.param(
                "{cpu: 1, example.com/fpga: 500m}",
                "spec.tasks[0].resources[example.com/fpga]: must be a whole number, got 500m",
                id="a milli quantity (half a device)",
            ),
            pytest.param(
                "{cpu: 1, Example.com/fpga: 1}",
                "spec.tasks[0].resources[Example.com/fpga]: not a qualified resource name "
                "(domain/name, such as example.com/fpga): the domain must be a lower-case DNS "
                "subdomain, got 'Example.com'",
                id="an upper-case domain",
            ),
            pytest.param(
                "{cpu: 1, example.com/: 1}",
                "spec.tasks[0].resources[example.com/]: not a qualified resource name "
                "(domain/name, such as example.com/fpga)",
                id="no name after the domain",
            ),
            pytest.param(
                "{cpu: 1, example.com/a/b: 1}",
                "spec.tasks[0].resources[example.com/a/b]: not a qualified resource name "
                "(domain/name, such as example.com/fpga)",
                id="two slashes",
            ),
            pytest.param(
                "{cpu: 1, example.com/-fpga: 1}",
                "spec.tasks[0].resources[example.com/-fpga]: not a qualified resource name "
                "(domain/name, such as example.com/fpga): the name after the domain must be at "
                "most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
                "digit, got '-fpga'",
                id="a name starting with '-'",
            ),
            pytest.param(
                "{cpu: 1, kubernetes.io/fpga: 1}",
                "spec.tasks[0].resources[kubernetes.io/fpga]: the kubernetes.io domains are "
                "reserved for Kubernetes' own resources (a DeviceClass is named by "
                "deviceclass.resource.kubernetes.io/<class>)",
                id="the kubernetes.io domain (native resources, not extended ones)",
            ),
            pytest.param(
                "{cpu: 1, requests.example.com/fpga: 1}",
                "spec.tasks[0].resources[requests.example.com/fpga]: a domain starting with "
                "'requests.' is reserved, as in Kubernetes",
                id="the requests. prefix (quota names)",
            ),
            pytest.param(
                "{cpu: 1, deviceclass.resource.kubernetes.io/Big_Class: 1}",
                "spec.tasks[0].resources[deviceclass.resource.kubernetes.io/Big_Class]: "
                "'Big_Class' is not a DeviceClass name (a lower-case DNS subdomain)",
                id="an implicit name that no class could have",
            ),
            pytest.param(
                "{cpu: 1, fpga: 1}",
                "spec.tasks[0].resources.fpga: unknown field",
                id="a name without a domain",
            ),
            pytest.param(
                "{cpu: 1, extended: {example.com/fpga: 1}}",
                "spec.tasks[0].resources.extended: unknown field",
                id="extended is not a field of the wire form",
            ),
            pytest.param(
                "{cpu: 1, a.b/c-d: 1, a.b-c/d: 1}",
                "spec.tasks[0].resources[a.b-c/d]: compiles to a claim named 'a-b-c-d', as "
                "resources[a.b/c-d] is",
                id="two names whose claims would share one name",
            ),
            pytest.param(
                "{cpu: 1, example.com/fpga: 1, claims: [{name: example-com-fpga, "
                "resourceClaimName: mine}]}",
                "spec.tasks[0].resources[example.com/fpga]: compiles to a claim named "
                "'example-com-fpga', as claims[0] is",
                id="a claim of the task already has that name",
            ),
            pytest.param(
                "{cpu: 0, example.com/fpga: 1}",
                "spec.tasks[0].resources.cpu: must be more than 0 cores, got 0",
                id="cpu refused as before",
            ),
            pytest.param(
                "{memory: -1Gi, example.com/fpga: 1}",
                "spec.tasks[0].resources.memory: must be more than 0 bytes, got -1Gi",
                id="memory refused as before",
            ),
        ],
    )
    def test_one_line_naming_the_field(
        self, service: ObjectService, resources: str, want: str
    ) -> None:
        with pytest.raises(InvalidObject) as caught:
            service.apply_text(job_text(resources))
        assert str(caught.value) == f"Job ext: {want}"


class TestRoundTrip:
    def test_read_back_and_applied_again_is_unchanged(self, service: ObjectService) -> None:
        resources = (
            "{cpu: 2, memory: 1Gi, example.com/fpga: 2, deviceclass.resource.kubernetes.io/nic: 1}"
        )
        service.apply_text(job_text(resources))
        stored = service.store.get("Job", "acme", "ext")
        assert isinstance(stored, Job)
        wire = stored.model_dump(mode="json", by_alias=True, exclude_none=True)
        # The names come back as keys of resources, as they were written.
        assert wire["spec"]["tasks"][0]["resources"] == {
            "cpu": "2",
            "memory": "1Gi",
            "claims": [],
            "example.com/fpga": 2,
            "deviceclass.resource.kubernetes.io/nic": 1,
        }
        again = Job.model_validate(wire)
        assert again.spec == stored.spec
        applied = service.apply_text(job_text(resources))
        assert applied[0].action == "unchanged"

    def test_json_wire_form_parses_to_the_same_model(self) -> None:
        parsed = TaskResources.model_validate({"example.com/fpga": 2})
        text = parsed.model_dump_json(by_alias=True, exclude_none=True)
        assert '"example.com/fpga":2' in text
        assert TaskResources.model_validate_json(text) == parsed


class TestSchema:
    @pytest.mark.parametrize("mode", ["validation", "serialization"])
    def test_requests_and_responses_show_the_fields_and_the_extended_names(
        self, mode: Literal["validation", "serialization"]
    ) -> None:
        schema = Job.model_json_schema(mode=mode)["$defs"]["TaskResources"]
        assert sorted(schema["properties"]) == ["claims", "cpu", "gpu", "memory"]
        assert schema["patternProperties"] == {
            "/": {"type": "integer", "minimum": 0, "maximum": 64}
        }
