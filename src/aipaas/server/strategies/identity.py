"""The rules of the identity kinds when the API writes them: Tenants, Users and Invitations.

Writing one changes who a token is or what it may do, so the service drops its cached
principals after. A tenant admin may change its Tenant's default priority class and nothing
else of it (tenancy/tenant_defaults.py); a tenant goes only once it holds no users, queues or
jobs. Users follow the ranks of tenancy/users.py. An Invitation is made by its own route.

Registered in server/strategies/__init__.py; called by ObjectService (server/service.py).
"""

from __future__ import annotations

from aipaas.api.finops import Invitation
from aipaas.api.tenancy import Tenant, User
from aipaas.errors import Conflict, FieldError, InvalidObject
from aipaas.server.strategies.base import KindStrategy, Writer, prepare_in_scope
from aipaas.tenancy import users
from aipaas.tenancy.principal import Principal
from aipaas.tenancy.tenant_defaults import default_class_only


class TenantStrategy(KindStrategy[Tenant]):
    changes_identity = True
    hides_some = True

    def prepare(self, obj: Tenant, writer: Writer) -> Tenant:
        if obj.metadata.tenant:
            raise InvalidObject(
                [FieldError("metadata.tenant", f"{obj.kind} objects belong to no tenant")]
            )
        if default_class_only(writer.store, writer.caller, obj):
            return obj.model_copy(update={"status": None})  # its admin's default class
        # Writing tenants is otherwise the platform admin's action: refused (403) before the
        # visibility of the tenant is considered.
        return prepare_in_scope(obj, writer, self.written_by)

    def visible_to(self, obj: Tenant, caller: Principal) -> bool:
        return caller.sees_tenant(obj.name)

    def delete(self, obj: Tenant, writer: Writer) -> None:
        for child in ("User", "Queue", "Job"):
            if writer.store.count(child, obj.name):
                raise Conflict(f"tenant {obj.name} still has {child.lower()}s; delete them first")


class UserStrategy(KindStrategy[User]):
    changes_identity = True

    def prepare(self, obj: User, writer: Writer) -> User:
        return users.prepare_user(writer.store, writer.caller, obj)  # ranks, tenant-less roles

    def delete(self, obj: User, writer: Writer) -> str:
        revoked = users.delete_user(writer.store, writer.caller, obj)  # ranks, last admin
        return f"user {obj.name} deleted ({revoked} token(s) revoked)"


class InvitationStrategy(KindStrategy[Invitation]):
    def prepare(self, obj: Invitation, writer: Writer) -> Invitation:
        # Its one-time token is made and shown by its route.
        raise InvalidObject(
            [FieldError("kind", "invite with POST /api/v1/invitations (aipaas invite)")]
        )
