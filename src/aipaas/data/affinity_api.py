"""The scheduler's data view built from API objects: what the live controller hands to the
DataAffinity plugin (``data_affinity_of(scheduler).view = data_view(datasets, jobs)``).

Pure: reads Dataset statuses (bytes per node, as the dataset extension reports them) and the
jobs' ``spec.datasets``. A job's mount names a dataset of the job's own tenant only, so the
view never lets one tenant's placement read another tenant's data.
"""

from __future__ import annotations

from collections.abc import Iterable

from aipaas.api.data import Dataset
from aipaas.api.job import Job
from aipaas.data.affinity import DataNeed, DataView


def dataset_key(tenant: str, name: str) -> str:
    return f"{tenant}/{name}"


def dataset_size(dataset: Dataset) -> int:
    """Measured size, else declared, else the largest copy any node reports (0: unknown)."""
    status = dataset.status
    if status is not None and status.size_bytes:
        return status.size_bytes
    declared = dataset.spec.declared_bytes()
    if declared:
        return declared
    return max((node.bytes for node in status.nodes), default=0) if status is not None else 0


def data_view(datasets: Iterable[Dataset], jobs: Iterable[Job]) -> DataView:
    """Bytes cached per node (per ``tenant/name``) and the datasets each job reads, keyed by
    the job's ``tenant/name`` (its pods are ``tenant/name/task-i``)."""
    view = DataView()
    sizes: dict[str, int] = {}
    for dataset in datasets:
        key = dataset_key(dataset.tenant, dataset.name)
        sizes[key] = dataset_size(dataset)
        for node in dataset.status.nodes if dataset.status is not None else ():
            view.cached.setdefault(node.node, {})[key] = node.bytes
    for job in jobs:
        needs = []
        for mount in job.spec.datasets or ():
            key = dataset_key(job.tenant, mount.name)
            if sizes.get(key):
                needs.append(DataNeed(key, sizes[key]))
        if needs:
            view.needs[f"{job.tenant}/{job.name}"] = tuple(needs)
    return view
