"""The references of the data kinds, checked where an object is applied (server/service.py):
a Dataset's ``secretRef`` and an output location's must name a Secret of the same tenant; a
Job's ``spec.datasets`` must name Datasets of the same tenant. Another tenant's objects are
never looked up, so a name of theirs reads as missing (their existence is not revealed). A
Secret that sets a proxy is refused as a dataset's or an output's credentials: a proxy would
carry the node's reads wherever the tenant chose (data/destinations.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, cast

from aipaas.api.data import REDACTED, Dataset, Secret
from aipaas.api.job import Job
from aipaas.api.meta import Object
from aipaas.data.destinations import proxy_key_refusal
from aipaas.errors import FieldError, InvalidObject
from aipaas.store.paging import Page
from aipaas.store.store import ObjectKey

T = TypeVar("T")


def data_reference_keys(obj: Object) -> list[ObjectKey]:
    """What applying ``obj`` must find, all in its own tenant."""
    if isinstance(obj, Dataset) and obj.spec.secret_ref is not None:
        return [("Secret", obj.tenant, obj.spec.secret_ref)]
    if isinstance(obj, Job):
        keys: list[ObjectKey] = [("Dataset", obj.tenant, m.name) for m in obj.spec.datasets or ()]
        keys += [
            ("Secret", obj.tenant, out.secret_ref)
            for out in obj.spec.outputs or ()
            if out.secret_ref is not None
        ]
        return keys
    return []


def check_data_references(obj: Object, found: Mapping[ObjectKey, Object]) -> None:
    problems: list[FieldError] = []
    ref = obj.spec.secret_ref if isinstance(obj, Dataset) else None
    if ref is not None and ("Secret", obj.tenant, ref) not in found:
        problems.append(_missing("spec.secretRef", "secret", ref, obj.tenant))
    elif ref is not None:
        problems += _proxies("spec.secretRef", ref, found[("Secret", obj.tenant, ref)])
    if isinstance(obj, Job):
        for index, mount in enumerate(obj.spec.datasets or ()):
            if ("Dataset", obj.tenant, mount.name) not in found:
                path = f"spec.datasets[{index}].name"
                problems.append(_missing(path, "dataset", mount.name, obj.tenant))
        for index, out in enumerate(obj.spec.outputs or ()):
            ref = out.secret_ref
            path = f"spec.outputs[{index}].secretRef"
            if ref is not None and ("Secret", obj.tenant, ref) not in found:
                problems.append(_missing(path, "secret", ref, obj.tenant))
            elif ref is not None:
                problems += _proxies(path, ref, found[("Secret", obj.tenant, ref)])
    if problems:
        raise InvalidObject(problems)


def _proxies(path: str, name: str, secret: Object) -> list[FieldError]:
    keys = secret.spec.data if isinstance(secret, Secret) else {}
    reasons = [proxy_key_refusal(key) for key in sorted(keys)]
    return [FieldError(path, f"secret {name}: {reason}") for reason in reasons if reason]


def _missing(path: str, kind: str, name: str, tenant: str) -> FieldError:
    return FieldError(path, f"{kind} {name} does not exist in tenant {tenant}")


def keep_shown_values(wanted: T, current: Object | None) -> T:
    """A Secret as written, with each value that is the API's mark for a hidden value
    (``***``, what a read shows) replaced by the value stored under that key: reading a Secret
    and applying it back changes nothing. The mark for a key that holds no value yet is
    refused, naming the key.

    Raises:
        InvalidObject: ``spec.data.KEY`` is the mark and no value is stored under KEY.
    """
    if not isinstance(wanted, Secret):
        return wanted
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
    return cast(T, wanted.model_copy(update={"spec": spec}))


def redact_secret(obj: T) -> T:
    """What the API shows of an object: a Secret's keys but never its values (to anyone; the
    controller reads them from the store)."""
    if isinstance(obj, Secret):
        return cast(T, obj.redacted())
    return obj


def redact_secrets(items: list[T]) -> list[T]:
    return [redact_secret(item) for item in items]


def redact_page(page: Page[T]) -> Page[T]:
    return Page(redact_secrets(page.items), page.next_after, page.remaining)
