"""A task's image (``spec.tasks[].image``) is its Kubernetes pod's container image, before the
job's image annotation and the backend's default."""

from __future__ import annotations

from dataclasses import replace

from aipaas.backends.base import LaunchRequest
from aipaas.backends.kubernetes.manifests import pod_manifest
from aipaas.backends.kubernetes.options import IMAGE_ANNOTATION, KubeOptions


def make_request(**changes: object) -> LaunchRequest:
    request = LaunchRequest(
        request_id="uid.worker-0.a0",
        task="worker-0",
        job="train",
        tenant="acme",
        node="node-1",
        command=("python3", "train.py"),
        env={"RANK": "0"},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
    )
    return replace(request, **changes)  # type: ignore[arg-type]


def image_of(request: LaunchRequest) -> str:
    pod = pod_manifest(request, KubeOptions(), [])
    return str(pod["spec"]["containers"][0]["image"])


def test_the_tasks_image_is_the_pods() -> None:
    request = make_request(image="registry.example.com/train:1")
    assert image_of(request) == "registry.example.com/train:1"


def test_the_tasks_image_wins_over_the_jobs_annotation() -> None:
    request = make_request(image="localhost/a:1", annotations={IMAGE_ANNOTATION: "localhost/b:1"})
    assert image_of(request) == "localhost/a:1"


def test_without_an_image_the_annotation_or_the_default_is_the_pods() -> None:
    assert image_of(make_request(annotations={IMAGE_ANNOTATION: "localhost/b:1"})) == (
        "localhost/b:1"
    )
    assert image_of(make_request()) == KubeOptions().default_image
