"""Manifests: the issue's examples load; every malformed one fails naming the field and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.api.job import Job
from aipaas.api.registry import MAX_DOCUMENT_BYTES, load_objects, resolve_kind
from aipaas.api.tenancy import Role, Tenant, User
from aipaas.errors import InvalidObject, PayloadTooLarge
from tests.support.bad_manifests import CASES

EXAMPLES = Path(__file__).parents[3] / "examples"


class TestExamples:
    def test_hello_loads_all_four_kinds(self) -> None:
        objects = load_objects((EXAMPLES / "hello.yaml").read_text())
        assert [o.kind for o in objects] == ["Tenant", "User", "Queue", "Job"]
        tenant, user, _queue, job = objects
        assert isinstance(tenant, Tenant) and tenant.spec.quota.gpu_milli() == 8000
        assert tenant.spec.quota.memory_mib() == 512 * 1024
        assert isinstance(user, User) and user.spec.role is Role.MEMBER
        assert isinstance(job, Job)
        assert job.spec.gang_size == 2
        assert job.spec.tasks[0].resources.amounts().cpu_milli == 1000
        assert job.spec.tasks[0].resources.amounts().memory_mib == 256

    @pytest.mark.parametrize(
        ("gpu", "want_count", "want_milli"),
        [
            pytest.param("2", 2, 1000, id="whole GPUs"),
            pytest.param("0.25", 1, 250, id="a quarter of one GPU"),
            pytest.param("{count: 1, fraction: 0.5, model: H100}", 1, 500, id="long form"),
            pytest.param("{count: 4, model: A100}", 4, 1000, id="model"),
        ],
    )
    def test_gpu_forms(self, gpu: str, want_count: int, want_milli: int) -> None:
        text = (
            "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  tasks:\n"
            f"    - {{name: w, command: [x], resources: {{gpu: {gpu}}}}}\n"
        )
        job = load_objects(text)[0]
        assert isinstance(job, Job)
        amounts = job.spec.tasks[0].resources.amounts()
        assert (amounts.gpu_count, amounts.gpu_milli) == (want_count, want_milli)

    def test_named_priority(self) -> None:
        text = (
            "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  priority: high\n"
            "  tasks: [{name: w, command: [x]}]\n"
        )
        job = load_objects(text)[0]
        assert isinstance(job, Job) and job.spec.priority == 1000

    @pytest.mark.parametrize("alias", ["job", "jobs", "Job", "JOBS"])
    def test_kind_aliases(self, alias: str) -> None:
        assert resolve_kind(alias) == "Job"


class TestBadManifests:
    def test_there_are_at_least_thirty(self) -> None:
        assert len(CASES) >= 30

    @pytest.mark.parametrize(
        ("text", "want_words"), [pytest.param(t, w, id=i) for i, t, w in CASES]
    )
    def test_rejected_naming_the_problem(self, text: str, want_words: list[str]) -> None:
        with pytest.raises(InvalidObject) as caught:
            load_objects(text)
        message = caught.value.message
        for word in want_words:
            assert word in message, f"{word!r} not in {message!r}"

    def test_oversized(self) -> None:
        with pytest.raises(PayloadTooLarge):
            load_objects("#" * (MAX_DOCUMENT_BYTES + 1))

    def test_field_errors_carry_paths(self) -> None:
        text = CASES[0][1]
        with pytest.raises(InvalidObject) as caught:
            load_objects(text)
        assert caught.value.fields[0].path == "spec.tasks[0].replicas"
