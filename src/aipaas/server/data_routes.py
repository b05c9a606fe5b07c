"""Routes of the data kinds beyond the generic ones: on-demand warming of a dataset.

Mounted before the generic /api/v1/{plural} routes (server/more_routes.py). Secrets are read
through the generic routes, which never show their values (server/data_checks.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from aipaas.api.data import Dataset
from aipaas.api.meta import Name
from aipaas.clock import isoformat
from aipaas.errors import Conflict, Forbidden, InvalidObject
from aipaas.server.auth import principal_of
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.tenancy.principal import Principal, Verb

WARM_NODES = "aipaas.dev/warm-nodes"
WARM_REQUESTED = "aipaas.dev/warm-requested"


router = APIRouter(prefix="/api/v1")
Caller = Annotated[Principal, Depends(principal_of)]
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]


def _service(request: Request, caller: Principal) -> ObjectService:
    store: Store = request.app.state.store
    return ObjectService(store, caller)


class WarmRequest(BaseModel):
    nodes: list[Name] = Field(default_factory=list, max_length=256)


@router.post("/datasets/{name}/warm", summary="Load a dataset into the caches of nodes now")
def warm_dataset(
    name: str, body: WarmRequest, request: Request, caller: Caller, tenant: TenantQuery = None
) -> dict[str, Any]:
    """The controller's dataset extension carries it out (events say when each load ends);
    no nodes: as many as the dataset's cache policy asks (``replicas``)."""
    service = _service(request, caller)
    dataset = service.get("Dataset", name, tenant)
    if not caller.may(Verb.WRITE, "Dataset"):
        raise Forbidden(f"role {caller.role} may not warm datasets")
    assert isinstance(dataset, Dataset)
    store: Store = request.app.state.store
    for _attempt in range(5):
        current = store.get("Dataset", dataset.tenant, dataset.name)
        annotations = {
            **current.metadata.annotations,
            WARM_NODES: ",".join(body.nodes),
            WARM_REQUESTED: isoformat(store.clock.now()),
        }
        meta = current.metadata.model_copy(update={"annotations": annotations})
        try:
            updated = store.update(
                current.model_copy(update={"metadata": meta}),
                expected_version=current.metadata.resource_version,
            )
        except Conflict:
            continue
        store.record_event(updated, "WarmRequested", f"warm on {_nodes(body)} by {caller.user}")
        return updated.to_wire()
    raise InvalidObject([], "the dataset kept changing; try again")


def _nodes(body: WarmRequest) -> str:
    return ", ".join(body.nodes) if body.nodes else "the policy's nodes"
