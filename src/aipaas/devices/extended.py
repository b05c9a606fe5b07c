"""Extended resources backed by DRA (KEP-5004): which DeviceClass serves a resource name.

Who calls it: the controller's claim book (controller/claims.py), which compiles a task's
``gpu:`` (alias ``nvidia.com/gpu``) to a claim of the class that serves ``nvidia.com/gpu``.
Pure.

A DeviceClass serves the extended resource its ``spec.extendedResourceName`` names, and every
class also serves its implicit name ``deviceclass.resource.kubernetes.io/<class name>``, as in
Kubernetes 1.34+. When several classes name the same resource, the one whose name sorts first
is taken (Kubernetes takes the newest; aipaas does not keep creation order across restores,
so it picks a stable one instead).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aipaas.api.devices import DeviceClass

__all__ = ["GPU_RESOURCE", "IMPLICIT_PREFIX", "serving_class"]

GPU_RESOURCE: Final = "nvidia.com/gpu"
IMPLICIT_PREFIX: Final = "deviceclass.resource.kubernetes.io/"


def serving_class(classes: Iterable[DeviceClass], resource: str) -> str | None:
    """The name of the class that serves ``resource``, or None when none does."""
    named = {c.metadata.name or "": c for c in classes}
    if resource.startswith(IMPLICIT_PREFIX):
        implicit = resource[len(IMPLICIT_PREFIX) :]
        return implicit if implicit in named else None
    serving = sorted(n for n, c in named.items() if c.spec.extended_resource_name == resource)
    return serving[0] if serving else None
