"""The error tree of aipaas: every expected failure has a stable ``code`` and an HTTP status.

Who raises: api (validation), store (not found, conflicts), tenancy (auth), the server maps them
to HTTP in one handler; the SDK maps HTTP answers back to the same classes.
Imports only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem in an object: where (``spec.tasks[0].replicas``) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


class AipaasError(Exception):
    """Base of every aipaas error."""

    code = "Internal"
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ClientError(AipaasError):
    """The caller asked for something wrong; retrying the same request fails the same way."""

    code = "BadRequest"
    http_status = 400


class InvalidObject(ClientError):
    """An object or request failed validation; ``fields`` say where and why."""

    code = "Invalid"
    http_status = 422

    def __init__(self, fields: list[FieldError], message: str | None = None) -> None:
        super().__init__(message or "; ".join(str(f) for f in fields) or "invalid object")
        self.fields = fields


class PayloadTooLarge(ClientError):
    code = "PayloadTooLarge"
    http_status = 413


class Unauthenticated(ClientError):
    code = "Unauthenticated"
    http_status = 401


class Forbidden(ClientError):
    code = "Forbidden"
    http_status = 403


class NotFound(ClientError):
    code = "NotFound"
    http_status = 404


class AlreadyExists(ClientError):
    code = "AlreadyExists"
    http_status = 409


class Conflict(ClientError):
    """A stale resourceVersion, or a change the object's state does not allow."""

    code = "Conflict"
    http_status = 409


class TooManyRequests(ClientError):
    """A bounded resource (log followers) is full; the same request may succeed later."""

    code = "TooManyRequests"
    http_status = 429


class ServerError(AipaasError):
    code = "Internal"
    http_status = 500


class Unavailable(ServerError):
    code = "Unavailable"
    http_status = 503


_BY_CODE: dict[str, type[AipaasError]] = {
    cls.code: cls
    for cls in (
        ClientError,
        InvalidObject,
        PayloadTooLarge,
        Unauthenticated,
        Forbidden,
        NotFound,
        AlreadyExists,
        Conflict,
        TooManyRequests,
        ServerError,
        Unavailable,
    )
}


def error_class(code: str) -> type[AipaasError]:
    """The class for a wire ``code``; unknown codes map to AipaasError."""
    return _BY_CODE.get(code, AipaasError)
