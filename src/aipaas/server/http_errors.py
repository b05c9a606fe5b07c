"""Every error answer in one shape, whatever its status: ``{code, message, fields}``.

Who calls it: app.py installs the handlers; body_limit.py and the apply fast path use
``error_body``. ``fields`` lists ``{path, reason}`` for each field at fault (empty when the
fault is no field's). Before this, 400 and 405 answered ``{"detail": ...}`` and 500 plain text.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from aipaas.api.errors import field_path
from aipaas.errors import AipaasError, InvalidObject

log = logging.getLogger(__name__)

# Codes for the statuses Starlette answers itself (an unknown route, a wrong method, ...), as
# the aipaas error classes name theirs.
_CODES = {
    400: "BadRequest",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    413: "PayloadTooLarge",
    422: "Invalid",
    500: "Internal",
    503: "Unavailable",
}
_KNOWN_STATUSES = frozenset(int(status) for status in HTTPStatus)


def error_body(err: AipaasError) -> dict[str, Any]:
    fields = err.fields if isinstance(err, InvalidObject) else []
    return {
        "code": err.code,
        "message": err.message,
        "fields": [{"path": f.path, "reason": f.reason} for f in fields],
    }


def install(app: FastAPI) -> None:
    app.add_exception_handler(AipaasError, aipaas_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _request_invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _internal)


async def aipaas_error(_request: Request | None, err: AipaasError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else None
    return JSONResponse(error_body(err), status_code=err.http_status, headers=headers)


async def _request_invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
    fields = [_field(e) for e in err.errors()]
    message = "; ".join(f"{f['path']}: {f['reason']}" if f["path"] else f["reason"] for f in fields)
    return JSONResponse({"code": "Invalid", "message": message, "fields": fields}, 422)


def _field(error: dict[str, Any]) -> dict[str, str]:
    if error.get("type") == "json_invalid":  # its loc is a character position, not a field
        detail = (error.get("ctx") or {}).get("error", "")
        return {"path": "", "reason": f"not valid JSON: {detail}".rstrip(": ")}
    loc = [p for p in error["loc"] if p not in ("query", "path", "body", "header")]
    return {"path": field_path(loc), "reason": str(error["msg"])}


async def _http_error(_request: Request, err: HTTPException) -> JSONResponse:
    status = err.status_code
    phrase = HTTPStatus(status).phrase if status in _KNOWN_STATUSES else "Error"
    code = _CODES.get(status) or phrase.title().replace(" ", "").replace("-", "")
    message = err.detail if isinstance(err.detail, str) else phrase
    body = {"code": code, "message": message, "fields": []}
    return JSONResponse(body, status_code=status, headers=err.headers)


async def _internal(request: Request, err: Exception) -> JSONResponse:
    return internal(f"{request.method} {request.url.path}", err)


def internal(where: str, err: Exception) -> JSONResponse:
    """Anything not foreseen: logged with its traceback, and the client told no more than that
    it happened (internals stay in the log)."""
    log.error("internal error on %s", where, exc_info=err)
    body = {"code": "Internal", "message": "internal server error", "fields": []}
    return JSONResponse(body, status_code=500)
