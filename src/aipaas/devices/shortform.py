"""The short GPU form of a Job's task, compiled to a resource.k8s.io/v1 claim.

Who calls it: the Job controller / scheduler when a task says ``gpu: ...`` instead of naming
claims. Pure.

    gpu: 2                                  -> 2 GPUs of class gpu.nvidia.com
    gpu: 0.5                                -> half of one shareable GPU (compute: 50)
    gpu: {count: 1, memory: 20Gi, model: H100}
        -> 1 GPU whose model is H100, with capacity request memory: 20Gi (a minimum on an
           exclusive GPU; the share taken on a GPU that allows multiple allocations)
    gpu: {count: 1, fraction: 0.2, memory: 16Gi}
        -> a fifth of one shareable GPU's compute and 16Gi of its memory

A fraction needs GPUs published with ``allowMultipleAllocations`` and a ``compute`` capacity in
percent (the sim topology's ``shared: true`` nodes do this).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from pydantic import ValidationError

from aipaas.api.devices import DeviceClass, ResourceClaim, ResourceClaimSpec
from aipaas.api.quantity import QuantityError, format_quantity, parse_quantity
from aipaas.devices.topology_files import DRIVER

__all__ = ["DEFAULT_CLASS", "ShortFormError", "default_class", "gpu_claim", "gpu_claim_spec"]

DEFAULT_CLASS: Final = "gpu.nvidia.com"
REQUEST_NAME: Final = "gpu"
_KEYS: Final = frozenset({"count", "memory", "model", "fraction"})


class ShortFormError(ValueError):
    """The short form is wrong; the message starts with the field path (``gpu.count``)."""


def gpu_claim_spec(
    value: int | float | Mapping[str, Any],
    *,
    device_class: str = DEFAULT_CLASS,
    driver: str = DRIVER,
    field: str = "gpu",
) -> ResourceClaimSpec:
    """Compile ``gpu: ...`` to a claim spec with one request named "gpu".

    Raises:
        ShortFormError: a bad value; the message names the field (``gpu.memory``) and reason.
    """
    options = _normalise(value, field)
    count = options.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > 64:
        raise ShortFormError(f"{field}.count: must be a whole number from 1 to 64, got {count!r}")
    body: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    selectors = []
    model = options.get("model")
    if model is not None:
        if not isinstance(model, str) or not model or '"' in model or "\\" in model:
            raise ShortFormError(f"{field}.model: must be a model name like H100, got {model!r}")
        selectors.append(f'device.attributes["{driver}"].model == "{model}"')
    requests: dict[str, str] = {}
    memory = options.get("memory")
    if memory is not None:
        try:
            amount = parse_quantity(memory)
        except QuantityError as err:
            raise ShortFormError(f"{field}.memory: {err}") from err
        if amount <= 0:
            raise ShortFormError(f"{field}.memory: must be positive, got {memory!r}")
        requests["memory"] = format_quantity(amount)
    fraction = options.get("fraction")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise ShortFormError(f"{field}.fraction: must be a number, got {fraction!r}")
        if not 0 < fraction <= 1:
            raise ShortFormError(f"{field}.fraction: must be in (0, 1], got {fraction!r}")
        if fraction < 1:
            if count != 1:
                raise ShortFormError(f"{field}.fraction: a fraction of a GPU needs count 1")
            percent = (Decimal(repr(float(fraction))) * 100).quantize(Decimal(1))
            requests["compute"] = str(max(percent, Decimal(1)))
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if requests:
        body["capacity"] = {"requests": requests}
    try:
        return ResourceClaimSpec.model_validate(
            {"devices": {"requests": [{"name": REQUEST_NAME, "exactly": body}]}}
        )
    except ValidationError as err:  # a device class name that is not a DNS subdomain
        raise ShortFormError(f"{field}: {err.errors()[0]['msg']}") from err


def gpu_claim(name: str, value: int | float | Mapping[str, Any], **options: Any) -> ResourceClaim:
    """A whole ResourceClaim named ``name`` from the short form (see :func:`gpu_claim_spec`)."""
    spec = gpu_claim_spec(value, **options)
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": spec.model_dump(by_alias=True, exclude_unset=True),
        }
    )


def _normalise(value: int | float | Mapping[str, Any], field: str) -> dict[str, Any]:
    if isinstance(value, bool):
        raise ShortFormError(f"{field}: must be a number or an object, not a boolean")
    if isinstance(value, int):
        return {"count": value}
    if isinstance(value, float):
        if value != value or value <= 0:
            raise ShortFormError(f"{field}: must be a positive number, got {value!r}")
        if value < 1:
            return {"count": 1, "fraction": value}
        if value != int(value):
            raise ShortFormError(f"{field}: more than one GPU must be a whole number, got {value}")
        return {"count": int(value)}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - _KEYS)
        if unknown:
            raise ShortFormError(
                f"{field}.{unknown[0]}: unknown field (known: count, fraction, memory, model)"
            )
        return {k: v for k, v in value.items() if v is not None}
    raise ShortFormError(f"{field}: must be a number or an object like {{count: 1, model: H100}}")


def default_class(driver: str = DRIVER) -> DeviceClass:
    """The class the short form names, as examples/dra/nvidia-classes.yaml defines it: whole
    GPUs of the driver. Built in, so the short form works before an admin applies classes; a
    stored DeviceClass of the same name wins."""
    return DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DEFAULT_CLASS},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{driver}" && '
                            f'device.attributes["{driver}"].type == "gpu"'
                        }
                    }
                ]
            },
        }
    )
