"""The OpenAPI document as clients and fuzzers need it, and /docs served with no network.

Who calls it: app.py (``install``). FastAPI's own document knows neither the bearer token (routes
authenticate in a dependency or by hand), nor the bodies of apply and replace (read as raw text,
YAML or JSON), nor the error answers: a schema-driven client could not call the API, and a
fuzzer never got past the 401 to the validation. This adds them, and the kinds a ``{plural}``
may name. /docs is Swagger UI from the files vendored under static/swagger-ui (its licence is
there): FastAPI's page loads them from a CDN, which a machine without internet cannot reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from aipaas.api.registry import KINDS

ASSETS: Final = Path(__file__).parent / "static" / "swagger-ui"
ASSETS_URL: Final = "/docs/assets"
_ERROR_REF: Final = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "title": "Error",
    "description": "Every error answer, whatever its status.",
    "required": ["code", "message", "fields"],
    "properties": {
        "code": {"type": "string", "description": "Stable: NotFound, Invalid, Forbidden, ..."},
        "message": {"type": "string"},
        "fields": {
            "type": "array",
            "description": "The fields at fault, where the fault is a field's.",
            "items": {
                "type": "object",
                "required": ["path", "reason"],
                "properties": {
                    "path": {"type": "string", "examples": ["spec.tasks[0].replicas"]},
                    "reason": {"type": "string"},
                },
            },
        },
    },
}
_ERRORS: Final = {
    "400": "The request is malformed",
    "401": "No token, or not a valid one",
    "403": "The caller's role does not allow it",
    "404": "No such object, kind or tenant (as seen by the caller)",
    "409": "It exists already, or its resourceVersion is stale",
    "413": "The body is over the server's limit",
    "422": "An object or a parameter is invalid; fields say which",
}
_OBJECT: Final[dict[str, Any]] = {
    "type": "object",
    "description": "One object: apiVersion, kind, metadata and the kind's spec.",
    "required": ["apiVersion", "kind", "metadata"],
    "properties": {
        "apiVersion": {"type": "string", "examples": ["aipaas/v1"]},
        "kind": {"type": "string", "enum": sorted(KINDS)},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "tenant": {"type": "string"}},
        },
        "spec": {"type": "object"},
    },
}
_MANIFEST_BODY: Final[dict[str, Any]] = {
    "required": True,
    "description": "YAML (one or more documents) or JSON text, at most the server's body limit.",
    "content": {
        "application/json": {"schema": _OBJECT},
        "application/yaml": {"schema": {"type": "string"}},
    },
}


def install(app: FastAPI) -> None:
    """Replace FastAPI's document and docs pages (create the app with docs_url=None)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(app.openapi_url or "/openapi.json", app.title))


def docs_page(openapi_url: str, title: str) -> str:
    """Swagger UI's page, every asset from this server (no CDN, no validator badge)."""
    return f"""<!DOCTYPE html>
<html>
<head>
<title>{title} - API</title>
<meta charset="utf-8">
<link rel="stylesheet" type="text/css" href="{ASSETS_URL}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ASSETS_URL}/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({{
  url: "{openapi_url}",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
}});
</script>
</body>
</html>
"""


def build(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An aipaas token (aipaas tokens create; the bootstrap admin token).",
    }
    schemas = components.setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    plurals = sorted({cls.plural for cls in KINDS.values() if cls.plural})
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            _complete(path, method, operation, plurals)
    # FastAPI's own validation-error schemas are no longer referred to: our 422 replaced them.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return schema


def _complete(path: str, method: str, operation: dict[str, Any], plurals: list[str]) -> None:
    # An operation that declares no security (redeeming an invitation: the invitation is the
    # credential) keeps it.
    if path.startswith("/api/") and operation.get("security") != []:
        operation["security"] = [{"bearer": []}]
    responses: dict[str, Any] = operation.setdefault("responses", {})
    for status, description in _ERRORS.items():
        responses[status] = _error(description)
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path" and parameter.get("name") == "plural":
            parameter["schema"] = {"type": "string", "enum": plurals, "title": "Plural"}
    if (path, method) in (("/api/v1/apply", "post"), ("/api/v1/{plural}/{name}", "put")):
        operation["requestBody"] = _MANIFEST_BODY
    if path.endswith("/logs") and "200" in responses:
        responses["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}
        # Followers (follow=true) beyond Settings.log_max_followers are refused (log_watch.py).
        responses["429"] = _error("Too many log followers on this server; try again later")
    if "{" in path:
        # The router matches the decoded path: a parameter holding a slash ("x/cancel") can
        # land on another route's path that does not take this method, which Starlette
        # answers with 405 (in the Error shape, http_errors.py).
        responses["405"] = _error("The path, once decoded, names a route without this method")


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}
