"""Who is calling, and what their role lets them do.

Rules (checked by the server for every request):
- platform-admin: everything, in every tenant; the only one who writes Tenants.
- tenant-admin: in their own tenant, writes Users, Queues and Jobs and creates tokens.
- member: in their own tenant, reads everything and writes Jobs (submit, cancel, delete).
- viewer: in their own tenant, reads only.
Another tenant's objects are invisible (404), not forbidden: their existence is not revealed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from aipaas.api.tenancy import Role


class Verb(StrEnum):
    READ = "read"
    WRITE = "write"


# DeviceClass and ResourceSlice (the cluster's devices) are the platform admin's alone.
_CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
_WRITABLE: dict[Role, frozenset[str]] = {
    Role.PLATFORM_ADMIN: frozenset(
        {"Tenant", "User", "Queue", "Job", "Token", "DeviceClass", "ResourceSlice"} | _CLAIM_KINDS
    ),
    Role.TENANT_ADMIN: frozenset({"User", "Queue", "Job", "Token"} | _CLAIM_KINDS),
    Role.MEMBER: frozenset({"Job"} | _CLAIM_KINDS),
    Role.VIEWER: frozenset(),
}


@dataclass(frozen=True)
class Principal:
    user: str
    tenant: str  # "" for platform admins
    role: Role

    @property
    def is_platform_admin(self) -> bool:
        return self.role is Role.PLATFORM_ADMIN

    def sees_tenant(self, tenant: str) -> bool:
        """Whether objects of ``tenant`` exist for this caller (else they read as 404)."""
        return self.is_platform_admin or tenant == self.tenant

    def may(self, verb: Verb, kind: str) -> bool:
        """Whether the role allows ``verb`` on ``kind`` (tenant visibility is checked apart)."""
        if verb is Verb.READ:
            return True
        return kind in _WRITABLE[self.role]
