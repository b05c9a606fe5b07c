"""The references of the data kinds, checked where an object is applied (the strategies of
server/strategies/ call these):
a Dataset's ``secretRef`` and an output location's must name a Secret of the same tenant; a
Job's ``spec.datasets`` must name Datasets of the same tenant. Another tenant's objects are
never looked up, so a name of theirs reads as missing (their existence is not revealed). A
Secret that sets a proxy is refused as a dataset's or an output's credentials: a proxy would
carry the node's reads wherever the tenant chose (data/destinations.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from aipaas.api.data import REDACTED, Dataset, Secret
from aipaas.api.job import Job
from aipaas.api.meta import Object
from aipaas.data.destinations import proxy_key_refusal
from aipaas.errors import FieldError, InvalidObject
from aipaas.store.store import ObjectKey


def dataset_keys(dataset: Dataset) -> list[ObjectKey]:
    """What applying a Dataset must find: its credentials' Secret."""
    if dataset.spec.secret_ref is None:
        return []
    return [("Secret", dataset.tenant, dataset.spec.secret_ref)]


def job_data_keys(job: Job) -> list[ObjectKey]:
    """What applying a Job must find of the data kinds: its Datasets, its outputs' Secrets."""
    keys: list[ObjectKey] = [("Dataset", job.tenant, m.name) for m in job.spec.datasets or ()]
    keys += [
        ("Secret", job.tenant, out.secret_ref)
        for out in job.spec.outputs or ()
        if out.secret_ref is not None
    ]
    return keys


def check_dataset_secret(dataset: Dataset, found: Mapping[ObjectKey, Object]) -> None:
    ref = dataset.spec.secret_ref
    if ref is None:
        return
    if ("Secret", dataset.tenant, ref) not in found:
        raise InvalidObject([_missing("spec.secretRef", "secret", ref, dataset.tenant)])
    problems = _proxies("spec.secretRef", ref, found[("Secret", dataset.tenant, ref)])
    if problems:
        raise InvalidObject(problems)


def check_job_data(job: Job, found: Mapping[ObjectKey, Object]) -> None:
    problems: list[FieldError] = []
    for index, mount in enumerate(job.spec.datasets or ()):
        if ("Dataset", job.tenant, mount.name) not in found:
            path = f"spec.datasets[{index}].name"
            problems.append(_missing(path, "dataset", mount.name, job.tenant))
    for index, out in enumerate(job.spec.outputs or ()):
        ref = out.secret_ref
        path = f"spec.outputs[{index}].secretRef"
        if ref is not None and ("Secret", job.tenant, ref) not in found:
            problems.append(_missing(path, "secret", ref, job.tenant))
        elif ref is not None:
            problems += _proxies(path, ref, found[("Secret", job.tenant, ref)])
    if problems:
        raise InvalidObject(problems)


def _proxies(path: str, name: str, secret: Object) -> list[FieldError]:
    keys = secret.spec.data if isinstance(secret, Secret) else {}
    reasons = [proxy_key_refusal(key) for key in sorted(keys)]
    return [FieldError(path, f"secret {name}: {reason}") for reason in reasons if reason]


def _missing(path: str, kind: str, name: str, tenant: str) -> FieldError:
    return FieldError(path, f"{kind} {name} does not exist in tenant {tenant}")


def keep_shown_values(wanted: Secret, current: Object | None) -> Secret:
    """A Secret as written, with each value that is the API's mark for a hidden value
    (``***``, what a read shows) replaced by the value stored under that key: reading a Secret
    and applying it back changes nothing. The mark for a key that holds no value yet is
    refused, naming the key.

    Raises:
        InvalidObject: ``spec.data.KEY`` is the mark and no value is stored under KEY.
    """
    stored = current.spec.data if isinstance(current, Secret) else {}
    marked = [key for key, value in wanted.spec.data.items() if value == REDACTED]
    if not marked:
        return wanted
    missing = [key for key in marked if key not in stored]
    if missing:
        raise InvalidObject(
            [
                FieldError(
                    f"spec.data.{key}",
                    f"{REDACTED!r} is how a read shows a hidden value; give the value itself",
                )
                for key in missing
            ]
        )
    data = {**wanted.spec.data, **{key: stored[key] for key in marked}}
    spec = wanted.spec.model_copy(update={"data": data})
    return wanted.model_copy(update={"spec": spec})
