"""What the server checks when a Service is applied: its queue exists in its tenant, and its
tenant may use its priority class (the rules a job's submission has: server/submission.py).
The controller resolves the class again for each replica job it makes."""

from __future__ import annotations

from collections.abc import Mapping

from aipaas.api.job import Job, JobSpec, TaskSpec
from aipaas.api.meta import Object, ObjectMeta
from aipaas.api.priority import PriorityClass
from aipaas.api.service import Service
from aipaas.api.tenancy import Tenant
from aipaas.errors import FieldError, InvalidObject
from aipaas.server.submission import priority_class_keys, resolve_priority
from aipaas.store.store import ObjectKey


def _as_job(service: Service) -> Job:
    """A replica's job, as far as the checks need one."""
    spec = service.spec
    return Job(
        metadata=ObjectMeta(name=service.name, tenant=service.tenant),
        spec=JobSpec(
            queue=spec.queue,
            priority_class_name=spec.priority_class_name,
            preemptible=spec.preemptible,
            tasks=[TaskSpec(name="server", command=list(spec.template.command))],
        ),
    )


def service_reference_keys(obj: Service) -> list[ObjectKey]:
    return [("Queue", obj.tenant, obj.spec.queue), *priority_class_keys(_as_job(obj))]


def check_service(obj: Service, found: Mapping[ObjectKey, Object], *, platform_admin: bool) -> None:
    """Raise InvalidObject naming the field when the queue or the priority class is refused."""
    if ("Queue", obj.tenant, obj.spec.queue) not in found:
        raise InvalidObject(
            [
                FieldError(
                    "spec.queue", f"queue {obj.spec.queue} does not exist in tenant {obj.tenant}"
                )
            ]
        )
    tenant = found.get(("Tenant", "", obj.tenant))

    def classes(name: str) -> PriorityClass | None:
        stored = found.get(("PriorityClass", "", name))
        return stored if isinstance(stored, PriorityClass) else None

    resolve_priority(
        _as_job(obj),
        platform_admin=platform_admin,
        tenant=tenant if isinstance(tenant, Tenant) else None,
        classes=classes,
    )
