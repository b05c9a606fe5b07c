"""Invitation routes (tenancy/invitations.py), part of the FinOps router:

    POST /api/v1/invitations         (tenant admins; body: an Invitation)
        -> 201 {"invitation": Invitation, "token": "aipinv_..."}  (the token, once)
    POST /api/v1/invitations/redeem  (no bearer token: the invitation is the credential;
        body {"token": "aipinv_..."}) -> 201 {"user", "tenant", "role", "token": "aip_..."}

Listing, reading and deleting (revoking) invitations are the generic object routes.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request
from pydantic import Field, ValidationError
from starlette.concurrency import run_in_threadpool

from aipaas.api.errors import invalid
from aipaas.api.finops import Invitation
from aipaas.api.meta import Model
from aipaas.api.parsing import load_json
from aipaas.api.registry import load_documents, parse_object
from aipaas.errors import FieldError, InvalidObject
from aipaas.server.auth import authenticate, principal_cache
from aipaas.server.body_limit import read_body
from aipaas.store import Store
from aipaas.tenancy.invitations import invite, redeem

router = APIRouter(tags=["tenancy"])
MAX_BYTES: Final = 8192


class Redemption(Model):
    token: str = Field(min_length=1, max_length=200)


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` written in place: inside the OpenAPI document a
    ``#/$defs/...`` reference would point at the document's root, where nothing is."""
    definitions: dict[str, Any] = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#/$defs/"):
                return resolve(definitions[reference.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


@router.post(
    "/invitations",
    status_code=201,
    summary="Invite a user to the tenant: a one-time token, shown once",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": _inlined(Invitation.model_json_schema(by_alias=True))
                }
            },
        }
    },
)
async def create_invitation(request: Request) -> dict[str, Any]:
    store = _store(request)
    header = request.headers.get("authorization")
    caller = await run_in_threadpool(authenticate, store, header, principal_cache(request))
    body = await read_body(request, MAX_BYTES)
    documents = load_documents(body)
    if len(documents) != 1:
        raise InvalidObject([FieldError("", "one Invitation")])
    wanted = parse_object(documents[0])
    if not isinstance(wanted, Invitation):
        raise InvalidObject([FieldError("kind", f"an Invitation, not a {wanted.kind}")])
    made, token = await run_in_threadpool(invite, store, caller, wanted)
    return {"invitation": made.to_wire(), "token": token}


@router.post(
    "/invitations/redeem",
    status_code=201,
    summary="Redeem an invitation: creates the user and returns its bearer token",
    openapi_extra={
        "security": [],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": Redemption.model_json_schema()}},
        },
    },
)
async def redeem_invitation(request: Request) -> dict[str, Any]:
    body = await read_body(request, MAX_BYTES)
    try:
        data = load_json(body.decode("utf-8")) if body.strip() else None
        wanted = Redemption.model_validate(data)
    except UnicodeDecodeError as err:
        raise InvalidObject([FieldError("", f"not UTF-8: {err}")]) from err
    except ValidationError as err:
        raise invalid(err, what="redemption") from err
    done = await run_in_threadpool(redeem, _store(request), wanted.token)
    return {
        "user": done.user.name,
        "tenant": done.user.tenant,
        "role": done.user.spec.role.value,
        "token": done.token,
    }
