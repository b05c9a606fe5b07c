"""`aipaas run --image IMG --setup CMD`: the manifest names the tasks' image and the job's
setup, and is a valid Job; without them the manifest has neither."""

from __future__ import annotations

from aipaas.api.job import Job
from aipaas.api.registry import parse_object
from aipaas.cli.run import build_manifest


def manifest(**extra: object) -> dict[str, object]:
    return build_manifest(
        "train",
        ["python3", "train.py"],
        queue="research",
        tenant="acme",
        replicas=1,
        gpus=0,
        cpu="1",
        memory="1Gi",
        env={},
        workdir=None,
        **extra,  # type: ignore[arg-type]
    )


def test_the_image_and_setup_asked_for_are_in_the_job() -> None:
    job = parse_object(
        manifest(image="localhost/train:1", setup=["pip install -r requirements.txt"])
    )
    assert isinstance(job, Job)
    assert job.spec.tasks[0].image == "localhost/train:1"
    assert job.spec.setup == ["pip install -r requirements.txt"]


def test_without_them_the_job_has_neither() -> None:
    spec = manifest()["spec"]
    assert isinstance(spec, dict)
    assert "setup" not in spec and "image" not in spec["tasks"][0]
