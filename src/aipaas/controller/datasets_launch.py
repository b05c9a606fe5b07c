"""A task's datasets and outputs, resolved for its launch: the tenant's Dataset and Secret objects
read from the store and put in ``LaunchRequest.datasets`` and ``.outputs`` (backends/datasets.py).

Only the job's own tenant is searched: the server already refused a job naming another
tenant's dataset, and this keeps it so if objects change after submission. A dataset deleted
since is an error: the start fails and the task is reported lost with the reason.
"""

from __future__ import annotations

import dataclasses
import json

from aipaas.api.data import Dataset, DatasetSpec, Secret
from aipaas.api.job import Job
from aipaas.backends.base import LaunchRequest
from aipaas.backends.datasets import DatasetMount, OutputUpload
from aipaas.data.cache import entry_key
from aipaas.data.source import SourceSpec
from aipaas.store import Store


class MissingDataset(Exception):
    """A dataset or its secret named by a job is not there any more."""


def fingerprint(spec: DatasetSpec) -> str:
    """What makes two versions of a dataset the same data (its cache entry's hash)."""
    return json.dumps(
        [spec.source, spec.endpoint, spec.sub_paths, spec.include], separators=(",", ":")
    )


def _credentials(store: Store, tenant: str, secret_ref: str | None, what: str) -> dict[str, str]:
    """The values of the tenant's Secret ``secret_ref`` (none named: no credentials)."""
    if secret_ref is None:
        return {}
    key = ("Secret", tenant, secret_ref)
    with store.transaction(write=False) as tx:
        secret = store.find_each([key], conn=tx).get(key)
    if not isinstance(secret, Secret):
        raise MissingDataset(f"{what}: secret {secret_ref} does not exist in tenant {tenant}")
    return dict(secret.spec.data)


def source_of(store: Store, dataset: Dataset) -> SourceSpec:
    """The dataset's source with its Secret's values (same tenant only)."""
    return SourceSpec(
        url=dataset.spec.source,
        endpoint=dataset.spec.endpoint,
        credentials=_credentials(
            store, dataset.tenant, dataset.spec.secret_ref, f"dataset {dataset.name}"
        ),
        sub_paths=tuple(dataset.spec.sub_paths),
        include=tuple(dataset.spec.include),
    )


def _outputs(store: Store, job: Job) -> tuple[OutputUpload, ...]:
    uploads = []
    for index, out in enumerate(job.spec.outputs or ()):
        where = f"job {job.name} output {index}"
        destination = SourceSpec(
            url=out.destination,
            endpoint=out.endpoint,
            credentials=_credentials(store, job.tenant, out.secret_ref, where),
        )
        uploads.append(
            OutputUpload(out.path, destination.to_json(), always=out.upload_on == "Always")
        )
    return tuple(uploads)


def key_of(dataset: Dataset) -> str:
    return entry_key(dataset.tenant, dataset.name, fingerprint(dataset.spec))


def with_datasets(store: Store, job: Job, request: LaunchRequest) -> LaunchRequest:
    """``request`` with the job's datasets and outputs (unchanged for a job with neither)."""
    if not job.spec.datasets and not job.spec.outputs:
        return request
    keys = [("Dataset", job.tenant, mount.name) for mount in job.spec.datasets or ()]
    with store.transaction(write=False) as tx:
        found = store.find_each(keys, conn=tx)
    mounts: list[DatasetMount] = []
    for mount, key in zip(job.spec.datasets or (), keys, strict=True):
        dataset = found.get(key)
        if not isinstance(dataset, Dataset):
            raise MissingDataset(f"dataset {mount.name} does not exist in tenant {job.tenant}")
        mounts.append(
            DatasetMount(
                name=mount.name,
                key=key_of(dataset),
                mount_path=mount.mount_path,
                source=source_of(store, dataset).to_json(),
                require_warm=mount.require_warm,
                stream=dataset.spec.cache.streaming,
            )
        )
    return dataclasses.replace(request, datasets=tuple(mounts), outputs=_outputs(store, job))
