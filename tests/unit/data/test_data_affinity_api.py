"""The live data view from API objects: bytes per node from Dataset statuses, a job's needs
from its spec.datasets, each tenant seeing only its own datasets; and the plugin placing a
job read from the API on the node its data is on."""

from __future__ import annotations

from typing import Any

import numpy as np

from aipaas.api.data import Dataset
from aipaas.api.job import Job
from aipaas.api.registry import parse_object
from aipaas.data.affinity import DataNeed
from aipaas.data.affinity_api import data_view, dataset_size
from aipaas.scheduler.batch.from_api import batch_job
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.plugins.data_affinity import DataAffinityArgs, DataAffinityScore

G = 1 << 30


def dataset(tenant: str, name: str, size: str | None, **status: Any) -> Dataset:
    spec: dict[str, Any] = {"source": "s3://bucket/data"}
    if size is not None:
        spec["size"] = size
    obj = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Dataset",
            "metadata": {"name": name, "tenant": tenant},
            "spec": spec,
            "status": status or None,
        }
    )
    assert isinstance(obj, Dataset)
    return obj


def job(tenant: str, name: str, *datasets: str) -> Job:
    obj = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": tenant},
            "spec": {
                "tasks": [{"name": "w", "command": ["x"], "resources": {"gpu": {"count": 1}}}],
                "datasets": [{"name": d, "mountPath": f"/data/{d}"} for d in datasets],
            },
        }
    )
    assert isinstance(obj, Job)
    return obj


def test_sizes_measured_then_declared_then_largest_copy() -> None:
    assert dataset_size(dataset("t", "d", "10Gi", size_bytes=3 * G)) == 3 * G
    assert dataset_size(dataset("t", "d", "10Gi")) == 10 * G
    copies = {"nodes": [{"node": "a", "bytes": 5}, {"node": "b", "bytes": 7}]}
    assert dataset_size(dataset("t", "d", None, **copies)) == 7


def test_view_holds_each_tenants_own_data_only() -> None:
    mine = dataset("alice", "imagenet", "10Gi", nodes=[{"node": "n1", "bytes": 10 * G}])
    theirs = dataset("bob", "imagenet", "10Gi", nodes=[{"node": "n2", "bytes": 10 * G}])
    jobs = [job("alice", "train", "imagenet"), job("eve", "steal", "imagenet")]
    view = data_view([mine, theirs], jobs)
    assert view.cached == {"n1": {"alice/imagenet": 10 * G}, "n2": {"bob/imagenet": 10 * G}}
    assert view.needs == {"alice/train": (DataNeed("alice/imagenet", 10 * G),)}


def test_the_plugin_prefers_the_node_holding_an_api_jobs_data() -> None:
    data = dataset("alice", "imagenet", "10Gi", nodes=[{"node": "n2", "bytes": 10 * G}])
    other = dataset("bob", "imagenet", "10Gi", nodes=[{"node": "n0", "bytes": 10 * G}])
    api_job = job("alice", "train", "imagenet")
    pod = batch_job(api_job, key_order=0, submitted=0.0).tasks[0].request
    state = ClusterState([NodeSpec(f"n{i}", 8000, 64_000, 8, "A100") for i in range(3)])
    plugin = DataAffinityScore(DataAffinityArgs(), data_view([data, other], [api_job]))
    assert list(plugin.score(state, pod, np.arange(3))) == [0, 0, 100]
