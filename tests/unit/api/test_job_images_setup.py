"""``spec.tasks[].image`` and ``spec.setup`` of a Job: what is accepted, and what is refused
with the field's path and the reason."""

from __future__ import annotations

import pytest

from aipaas.api.job import Job
from aipaas.api.registry import load_objects
from aipaas.errors import InvalidObject

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: j, tenant: acme}}
spec:
  queue: research
{setup}  tasks:
    - name: worker
      command: [python3, train.py]
{image}"""


def job(image: str | None = None, setup: str | None = None) -> str:
    return JOB.format(
        image=f"      image: {image}\n" if image is not None else "",
        setup=f"  setup: {setup}\n" if setup is not None else "",
    )


class TestImage:
    @pytest.mark.parametrize(
        "image",
        [
            pytest.param("localhost/train:1.0", id="a local image with a tag"),
            pytest.param("busybox", id="a bare name"),
            pytest.param("registry.example.com:5000/team/train", id="a registry with a port"),
            pytest.param("repo/train@sha256:" + "a" * 64, id="by digest"),
        ],
    )
    def test_an_image_reference_is_kept(self, image: str) -> None:
        (loaded,) = load_objects(job(image=f'"{image}"'))
        assert isinstance(loaded, Job)
        assert loaded.spec.tasks[0].image == image

    def test_a_task_without_an_image_runs_on_the_host(self) -> None:
        (loaded,) = load_objects(job())
        assert isinstance(loaded, Job)
        assert loaded.spec.tasks[0].image is None
        assert (
            "image" not in loaded.model_dump(by_alias=True, exclude_none=True)["spec"]["tasks"][0]
        )

    @pytest.mark.parametrize(
        "image",
        [
            pytest.param("--privileged", id="a podman option"),
            pytest.param("train image", id="a space"),
            pytest.param("Repo/Train", id="upper case in the path"),
            pytest.param("x" * 600, id="too long"),
        ],
    )
    def test_a_bad_image_is_refused_naming_its_field(self, image: str) -> None:
        with pytest.raises(InvalidObject) as caught:
            load_objects(job(image=f'"{image}"'))
        (error,) = caught.value.fields
        assert error.path == "spec.tasks[0].image"
        assert "image reference" in error.reason


class TestSetup:
    def test_setup_commands_are_kept_in_order(self) -> None:
        (loaded,) = load_objects(job(setup='["python3 -m venv $AIPAAS_SETUP_DIR/v", "pip -V"]'))
        assert isinstance(loaded, Job)
        assert loaded.spec.setup == ["python3 -m venv $AIPAAS_SETUP_DIR/v", "pip -V"]

    @pytest.mark.parametrize(
        ("setup", "want_path", "want_words"),
        [
            pytest.param('["ok", "  "]', "spec.setup", "command 1 is empty", id="a blank command"),
            pytest.param("[]", "spec.setup", "at least 1", id="an empty list"),
            pytest.param(
                "[" + ", ".join(["x"] * 33) + "]", "spec.setup", "at most 32", id="too many"
            ),
            pytest.param('"pip install"', "spec.setup", "list", id="a string, not a list"),
        ],
    )
    def test_a_bad_setup_is_refused_naming_its_field(
        self, setup: str, want_path: str, want_words: str
    ) -> None:
        with pytest.raises(InvalidObject) as caught:
            load_objects(job(setup=setup))
        (error,) = caught.value.fields
        assert error.path == want_path
        assert want_words in error.reason
