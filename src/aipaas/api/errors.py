"""Turn pydantic's errors into aipaas field errors with readable paths.

``('spec', 'tasks', 0, 'resources', 'cpu')`` becomes ``spec.tasks[0].resources.cpu``; a key
with a ``/`` (an extended resource's name) is written in brackets:
``spec.tasks[0].resources[example.com/fpga]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from aipaas.errors import FieldError, InvalidObject

_REASONS = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def field_path(loc: Sequence[str | int], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int) or "/" in part:  # "/": a key (an extended resource's name)
            path += f"[{part}]"
        elif part.startswith(("function-", "tagged-union")):
            continue
        else:
            path = f"{path}.{part}" if path else part
    return path


def _reason(error: ErrorDetails) -> str:
    if error["type"] in _REASONS:
        return _REASONS[error["type"]]
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if message.startswith("Assertion failed, "):
        message = message[len("Assertion failed, ") :]
    return message


def to_field_errors(err: ValidationError, prefix: str = "") -> list[FieldError]:
    return [FieldError(field_path(e["loc"], prefix), _reason(e)) for e in err.errors()]


def invalid(err: ValidationError, prefix: str = "", what: str = "") -> InvalidObject:
    fields = to_field_errors(err, prefix)
    text = "; ".join(str(f) for f in fields)
    return InvalidObject(fields, f"{what}: {text}" if what else text)
