"""Extended resources backed by DRA (KEP-5004): which DeviceClass serves a resource name.

Who calls it: the controller's claim book (controller/claims.py), which compiles a task's
``gpu:`` (alias ``nvidia.com/gpu``) to a claim of the class that serves ``nvidia.com/gpu``, and
each other extended resource a task asks (``example.com/fpga: 2``) to a claim of the class
that serves that name. Pure.

A DeviceClass serves the extended resource its ``spec.extendedResourceName`` names, and every
class also serves its implicit name ``deviceclass.resource.kubernetes.io/<class name>``, as in
Kubernetes 1.34+. When several classes name the same resource, the one whose name sorts first
is taken (Kubernetes takes the newest; aipaas does not keep creation order across restores,
so it picks a stable one instead). A name no class serves is served by none: the task waits
until one is created, as a pod whose extended resource no node offers stays Pending.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aipaas.api.devices import DeviceClass
from aipaas.api.resources import EXTENDED_GPU, IMPLICIT_PREFIX

__all__ = ["GPU_RESOURCE", "IMPLICIT_PREFIX", "serving_class", "unserved_message"]

GPU_RESOURCE: Final = EXTENDED_GPU


def serving_class(classes: Iterable[DeviceClass], resource: str) -> str | None:
    """The name of the class that serves ``resource``, or None when none does."""
    named = {c.metadata.name or "": c for c in classes}
    if resource.startswith(IMPLICIT_PREFIX):
        implicit = resource[len(IMPLICIT_PREFIX) :]
        return implicit if implicit in named else None
    serving = sorted(n for n, c in named.items() if c.spec.extended_resource_name == resource)
    return serving[0] if serving else None


def unserved_message(resource: str) -> str:
    """Why a task asking ``resource`` waits when no class serves it."""
    return f"no DeviceClass serves extended resource {resource}"
