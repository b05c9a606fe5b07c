"""A task's devices: the claim its ``resources.gpu`` short form compiles to, the claim each of
its extended resources compiles to (``example.com/fpga: 2``: ``extended_claim``), the devices its
claims were given (what the backend pins the task to), and the variables that enforce a GPU
share on its node (``with_share_enforcement``).

Pure: no store, no backend. Who calls it: controller/claims.py (claims) and controller/cycle.py
(the devices a task starts with, and its share's enforcement).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from typing import Any, Final

from aipaas.api.devices import AllocationResult, DeviceClass, ResourceClaim
from aipaas.api.job import Job
from aipaas.api.resources import SHORT_FORM_CLAIM, GpuRequest, extended_claim_suffix
from aipaas.backends.base import ClaimDevice, LaunchRequest, NodeInfo
from aipaas.devices.extended import unserved_message
from aipaas.devices.share_enforcement import Enforcement, enforce, node_mechanism, share_limits
from aipaas.devices.shortform import DEFAULT_CLASS, gpu_claim
from aipaas.scheduler.framework.types import MILLI_PER_GPU

#: a claim compiled from ``gpu:`` or from an extended resource (its value says which): deleted
#: with its task, as Kubernetes deletes the claim it made for a pod's extended resources
SHORT_FORM_ANNOTATION: Final = "aipaas.dev/from-short-form"


def short_form_claim_name(job: Job, task: str) -> str:
    """The stored name of a task replica's compiled ``gpu:`` claim: ``JOB-TASK-gpu``."""
    return f"{job.name}-{task}-{SHORT_FORM_CLAIM}"[:253]


def compiles_to_claim(gpu: GpuRequest | None) -> bool:
    """Whole GPUs go to the device allocator; fractions keep the milli-GPU path (see
    docs/devices.md: a fraction shares a GPU that the ledger then holds for such work)."""
    return gpu is not None and gpu.count > 0 and gpu.milli >= MILLI_PER_GPU and not gpu.is_share


def short_form_claim(
    job: Job, task: str, gpu: GpuRequest, device_class: str = DEFAULT_CLASS
) -> ResourceClaim:
    """The claim ``gpu:`` compiles to for one replica (namespace: the job's tenant), of
    ``device_class`` (the class that serves ``nvidia.com/gpu`` where one does: KEP-5004)."""
    return _compiled(
        short_form_claim_name(job, task), job.tenant, gpu.count, gpu.model, gpu.memory, device_class
    )


@lru_cache(maxsize=4096)
def _compiled(
    name: str,
    tenant: str,
    count: int,
    model: str | None,
    memory: str | None,
    device_class: str = DEFAULT_CLASS,
) -> ResourceClaim:
    # Pending jobs are tried every cycle: compiling (and validating) once per replica is enough.
    options: dict[str, Any] = {"count": count, "model": model, "memory": memory}
    made = gpu_claim(name, options, field="resources.gpu", device_class=device_class)
    meta = made.metadata.model_copy(update={"namespace": tenant})
    return made.model_copy(update={"metadata": meta})


def extended_claim_name(job: Job, task: str, resource: str) -> str:
    """The stored name of a task replica's claim for extended resource ``resource``:
    ``JOB-TASK-<resource in lower case, other characters '-'>`` (``train-worker-0-example-com-
    fpga``); the API refuses a task whose two resources or claims would share one."""
    return f"{job.name}-{task}-{extended_claim_suffix(resource)}"[:253].rstrip("-.")


def extended_claim(
    job: Job, task: str, resource: str, count: int, device_class: str | None
) -> ResourceClaim:
    """The claim extended resource ``resource: count`` compiles to for one replica: ``count``
    devices of ``device_class`` (the class that serves the name), in one request, as the claim
    kube-scheduler makes for a pod's extended resources (KEP-5004). ``device_class`` None (no
    class serves the name): a claim no device meets, whose selector says why."""
    name = extended_claim_name(job, task, resource)
    return _extended(name, job.tenant, resource, count, device_class)


#: the class of a claim for an extended resource no class serves: built in (the claim book
#: adds it), so that the allocator reads the claim's own selector, which is false for every
#: device and names the resource, rather than stopping at "device class does not exist"
UNSERVED_CLASS: Final = "unserved.extended-resource.aipaas.dev"
UNSERVED: Final = DeviceClass.model_validate(
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": UNSERVED_CLASS},
        "spec": {},
    }
)


@lru_cache(maxsize=4096)
def _extended(
    name: str, tenant: str, resource: str, count: int, device_class: str | None
) -> ResourceClaim:
    # Pending jobs are tried every cycle: compiling (and validating) once per replica is enough.
    body: dict[str, Any] = {"deviceClassName": device_class or UNSERVED_CLASS, "count": count}
    if device_class is None:
        # False for every device, even if a class of that name were created.
        body["selectors"] = [{"cel": {"expression": f'"{unserved_message(resource)}" == ""'}}]
    request = extended_claim_suffix(resource)[:63].rstrip("-")
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": tenant},
            "spec": {"devices": {"requests": [{"name": request, "exactly": body}]}},
        }
    )


def claim_devices(allocations: Iterable[AllocationResult]) -> tuple[ClaimDevice, ...]:
    """The devices of a task's allocated claims, in allocation order, each once."""
    seen: dict[tuple[str, str, str], None] = {}
    for allocation in allocations:
        for result in allocation.devices.results:
            if not result.admin_access:
                seen.setdefault((result.driver, result.pool, result.device), None)
    return tuple(ClaimDevice(*key) for key in seen)


def with_share_enforcement(
    request: LaunchRequest, gpu: GpuRequest | None, node: NodeInfo | None
) -> tuple[LaunchRequest, Enforcement | None]:
    """``request`` with the variables that hold a GPU share to its memory and cores on
    ``node`` (devices/share_enforcement.py: MPS, else HAMi-core, else none), and what the
    task's status says about it; a task that asks no share (or whose node is not known) is
    left as it is (None)."""
    if gpu is None or not gpu.is_share or node is None:
        return request, None
    mechanism, library = node_mechanism(node.labels, node.annotations)
    found = enforce(
        share_limits(gpu, node.gpu_memory_mib),
        mechanism,
        node=node.name,
        library=library,
        attempt_key=request.request_id,
        preload=request.env.get("LD_PRELOAD", ""),
    )
    if not found.env:
        return request, found
    return replace(request, env={**request.env, **found.env}), found
