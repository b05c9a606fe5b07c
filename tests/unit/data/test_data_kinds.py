"""Dataset, Secret and a job's datasets and outputs: what is accepted, and what is refused with
an error naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.data import REDACTED, Dataset, Secret
from aipaas.api.job import Job
from aipaas.api.registry import parse_object
from aipaas.errors import InvalidObject


def _dataset(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Dataset",
        "metadata": {"name": "ds", "tenant": "acme"},
        "spec": {"source": "s3://bucket/path", **spec},
    }


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "j", "tenant": "acme"},
        "spec": {"tasks": [{"name": "t", "command": ["true"]}], **spec},
    }


def _refused(data: dict[str, Any]) -> tuple[list[str], str]:
    with pytest.raises(InvalidObject) as caught:
        parse_object(data)
    return [f.path for f in caught.value.fields], str(caught.value)


def test_a_full_dataset_round_trips() -> None:
    data = _dataset(
        endpoint="http://127.0.0.1:9000",
        secretRef="creds",
        subPaths=["train", "val/part-1"],
        include=["*.parquet"],
        size="40Gi",
        cache={"pools": ["gpu-a"], "replicas": 2, "mode": "pinned", "ttl": "12h"},
    )
    dataset = parse_object(data)
    assert isinstance(dataset, Dataset)
    assert dataset.spec.declared_bytes() == 40 << 30
    assert parse_object(dataset.to_wire()) == dataset
    for source in ("https://example.com/a.tar", "file:///data/sets/a", "gs://bucket/x"):
        assert isinstance(parse_object(_dataset(source=source)), Dataset)


@pytest.mark.parametrize(
    ("spec", "path", "reason"),
    [
        ({"source": "/etc/passwd"}, "spec.source", "scheme"),
        ({"source": "file://etc/passwd"}, "spec.source", "absolute"),
        ({"source": "zip::s3://b/x.zip"}, "spec.source", "chained"),
        ({"source": "memory://x"}, "spec.source", "not allowed"),
        ({"source": "local:///x"}, "spec.source", "not allowed"),
        ({"source": "nosuchfs://x"}, "spec.source", "unknown fsspec protocol"),
        ({"source": "s3:///no-bucket"}, "spec.source", "bucket"),
        ({"endpoint": "ftp://host"}, "spec.endpoint", "http"),
        ({"endpoint": "http://169.254.169.254"}, "spec.endpoint", "link-local"),
        ({"source": "http://169.254.169.254/latest/"}, "spec.source", "link-local"),
        ({"secretRef": "Not_A_Name"}, "spec.secretRef", "valid name"),
        ({"subPaths": ["../up"]}, "spec.subPaths", "'..'"),
        ({"subPaths": ["/abs"]}, "spec.subPaths", "relative"),
        ({"include": ["/etc/*"]}, "spec.include", "relative"),
        ({"size": "lots"}, "spec.size", ""),
        ({"size": "-1Gi"}, "spec.size", "negative"),
        ({"cache": {"replicas": -1}}, "spec.cache.replicas", ""),
        ({"cache": {"mode": "sticky"}}, "spec.cache.mode", ""),
        ({"cache": {"ttl": "forever"}}, "spec.cache.ttl", "duration"),
        ({"cache": {"ttl": 0}}, "spec.cache.ttl", "more than 0"),
        ({"extra": 1}, "spec.extra", ""),
    ],
)
def test_bad_datasets_name_the_field(spec: dict[str, Any], path: str, reason: str) -> None:
    paths, message = _refused(_dataset(**spec))
    assert path in paths, message
    assert reason in message


def test_a_secret_keeps_values_but_shows_only_keys() -> None:
    secret = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "tenant": "acme"},
            "spec": {"data": {"accessKeyId": "AK", "secretAccessKey": "SK"}},
        }
    )
    assert isinstance(secret, Secret)
    assert secret.spec.data["secretAccessKey"] == "SK"
    shown = secret.redacted().to_wire()
    assert shown["spec"]["data"] == {"accessKeyId": REDACTED, "secretAccessKey": REDACTED}
    assert "SK" not in str(shown)
    paths, _ = _refused(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "spec": {"data": {"bad key": "x"}},
        }
    )
    assert paths == ["spec.data"]


def test_a_job_names_datasets_and_outputs() -> None:
    job = parse_object(
        _job(
            datasets=[{"name": "imagenet-subset", "mountPath": "/data/in", "requireWarm": True}],
            outputs=[{"path": "/data/out", "destination": "s3://b/out", "secretRef": "creds"}],
        )
    )
    assert isinstance(job, Job)
    assert job.spec.datasets is not None and job.spec.datasets[0].read_only
    assert "datasets" not in parse_object(_job()).to_wire()["spec"]  # unchanged without them


@pytest.mark.parametrize(
    ("spec", "path", "reason"),
    [
        ({"datasets": [{"name": "a", "mountPath": "data"}]}, "spec.datasets.0.mountPath", ""),
        ({"datasets": [{"name": "a", "mountPath": "/"}]}, "spec.datasets.0.mountPath", "/"),
        ({"datasets": [{"name": "a", "mountPath": "/x/../y"}]}, "spec.datasets.0.mountPath", ".."),
        (
            {"datasets": [{"name": "a", "mountPath": "/d", "readOnly": False}]},
            "spec.datasets.0.readOnly",
            "",
        ),
        (
            {"datasets": [{"name": "a", "mountPath": "/d"}, {"name": "a", "mountPath": "/e"}]},
            "spec.datasets",
            "named twice",
        ),
        (
            {"datasets": [{"name": "a", "mountPath": "/d"}, {"name": "b", "mountPath": "/d/"}]},
            "spec.datasets",
            "used twice",
        ),
        (
            {"outputs": [{"path": "/o", "destination": "memory://x"}]},
            "spec.outputs.0.destination",
            "",
        ),
        ({"outputs": [{"path": "o", "destination": "s3://b/o"}]}, "spec.outputs.0.path", ""),
    ],
)
def test_bad_job_datasets_name_the_field(spec: dict[str, Any], path: str, reason: str) -> None:
    paths, message = _refused(_job(**spec))
    assert any(p.replace("[", ".").replace("]", "") == path for p in paths), (paths, message)
    assert reason in message
