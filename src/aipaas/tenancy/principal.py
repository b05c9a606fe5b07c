"""Who is calling, and what their role lets them do.

Rules (checked by the server for every request):
- platform-admin: everything, in every tenant; the only one who writes Tenants.
- tenant-admin: in their own tenant, writes Users, Queues and Jobs and creates tokens.
- member: in their own tenant, reads everything and writes Jobs (submit, cancel, delete).
- viewer: in their own tenant, reads only.
- metrics-reader: reads /metrics and nothing else (every API route answers 403).
Another tenant's objects are invisible (404), not forbidden: their existence is not revealed.
Nobody acts on a user ranked above itself (``may_act_on``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from aipaas.api.tenancy import Role


class Verb(StrEnum):
    READ = "read"
    WRITE = "write"


# DeviceClass, ResourceSlice and DeviceTaintRule (the cluster's devices) are the platform
# admin's alone.
_CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
# A tenant's budgets and invitations are its admins' (issue 15).
_TENANT_ADMIN_KINDS = frozenset({"Budget", "Invitation"})
# A tenant's datasets and the credentials they read with are its admins' (issue 13).
_TENANT_ADMIN_KINDS |= {"Dataset", "Secret"}
# Services are submitted like jobs, by members too (issue 14).
_TENANT_ADMIN_KINDS |= {"Service"}
_WRITABLE: dict[Role, frozenset[str]] = {
    Role.PLATFORM_ADMIN: frozenset(
        {"Tenant", "User", "Queue", "Job", "Token", "DeviceClass", "ResourceSlice"}
        | {"DeviceTaintRule"}
        | _CLAIM_KINDS
        | _TENANT_ADMIN_KINDS
    ),
    Role.TENANT_ADMIN: frozenset(
        {"User", "Queue", "Job", "Token"} | _CLAIM_KINDS | _TENANT_ADMIN_KINDS
    ),
    Role.MEMBER: frozenset({"Job", "Service"} | _CLAIM_KINDS),
    Role.VIEWER: frozenset(),
    Role.METRICS_READER: frozenset(),
}
# Tenant roles by rank. The tenant-less roles are outside it: only a platform admin acts on
# a platform admin or a metrics reader.
RANK: Final[dict[Role, int]] = {
    Role.VIEWER: 1,
    Role.MEMBER: 2,
    Role.TENANT_ADMIN: 3,
    Role.PLATFORM_ADMIN: 4,
}


@dataclass(frozen=True)
class Principal:
    user: str
    tenant: str  # "" for platform admins and metrics readers
    role: Role
    uid: str = ""  # the User object's uid: what tokens belong to

    @property
    def is_platform_admin(self) -> bool:
        return self.role is Role.PLATFORM_ADMIN

    def sees_tenant(self, tenant: str) -> bool:
        """Whether objects of ``tenant`` exist for this caller (else they read as 404)."""
        return self.is_platform_admin or (bool(self.tenant) and tenant == self.tenant)

    def may(self, verb: Verb, kind: str) -> bool:
        """Whether the role allows ``verb`` on ``kind`` (tenant visibility is checked apart)."""
        if verb is Verb.READ:
            return self.role is not Role.METRICS_READER
        return kind in _WRITABLE[self.role]

    def may_act_on(self, role: Role) -> bool:
        """Whether this caller may mint tokens for, change, delete or list the tokens of a
        user of ``role`` (and give a user that role): never one ranked above itself."""
        if self.is_platform_admin:
            return True
        mine, theirs = RANK.get(self.role), RANK.get(role)
        return mine is not None and theirs is not None and theirs <= mine
