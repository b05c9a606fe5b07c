"""The one thing of its Tenant a tenant admin may write: the default priority class its jobs
get (``spec.defaultPriorityClass``), to a class the tenant is allowed. The allowed classes, the
quota, the weight and the guarantees stay the platform admin's."""

from __future__ import annotations

from aipaas.api.priority import DEFAULT_ALLOWED
from aipaas.api.tenancy import Role, Tenant
from aipaas.errors import FieldError, InvalidObject
from aipaas.store import Store
from aipaas.tenancy.principal import Principal


def default_class_only(store: Store, caller: Principal, wanted: Tenant) -> bool:
    """Whether ``wanted`` is the caller's tenant changed only in its default priority class
    (by its tenant admin); raises when that class is not among the allowed ones."""
    if caller.role is not Role.TENANT_ADMIN or caller.tenant != wanted.name:
        return False
    stored = store.find("Tenant", "", wanted.name)
    if not isinstance(stored, Tenant):
        return False
    new = wanted.spec.default_priority_class
    rest = wanted.spec.model_copy(
        update={"default_priority_class": stored.spec.default_priority_class}
    )
    if rest != stored.spec or _labels(wanted) != _labels(stored):
        return False
    allowed = stored.spec.allowed_priority_classes
    if new != stored.spec.default_priority_class and new not in (
        DEFAULT_ALLOWED if allowed is None else allowed
    ):
        raise InvalidObject(
            [
                FieldError(
                    "spec.defaultPriorityClass",
                    f"{new} is not among the classes tenant {wanted.name} is allowed",
                )
            ]
        )
    return True


def _labels(tenant: Tenant) -> tuple[dict[str, str], dict[str, str]]:
    return tenant.metadata.labels, tenant.metadata.annotations
