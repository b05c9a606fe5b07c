"""Durations as manifests write them: ``90s``, ``30m``, ``2h``, ``1d``, compounds like
``1h30m``, or a whole number of seconds.

The value is kept as written (so that a fetched object applies again unchanged);
``seconds()`` gives its length. A bad value is refused by pydantic with the field's path.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import BeforeValidator

UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: a bound that keeps arithmetic on times sane (about 100 years)
MAX_SECONDS: Final = 100 * 365 * 86400
_PART = re.compile(r"(\d+)([smhd])")
_WHOLE = re.compile(r"(?:\d+[smhd])+")


def seconds(value: int | str) -> int:
    """The length of a duration in whole seconds (ValueError when it is not one)."""
    if isinstance(value, bool):
        raise ValueError(_problem(value))
    if isinstance(value, int):
        total = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            total = int(text)
        elif _WHOLE.fullmatch(text):
            total = sum(int(n) * UNITS[unit] for n, unit in _PART.findall(text))
        else:
            raise ValueError(_problem(value))
    else:
        raise ValueError(_problem(value))
    if total < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    if total > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS} seconds (100 years), got {value!r}")
    return total


def _problem(value: object) -> str:
    return (
        "must be a duration like 90s, 30m, 2h, 1d or 1h30m, or a whole number of seconds, "
        f"got {value!r}"
    )


def _check(value: Any) -> Any:
    seconds(value)  # raises with the reason; pydantic adds the field's path
    return value


def _check_positive(value: Any) -> Any:
    if seconds(value) == 0:
        raise ValueError(f"must be more than 0 seconds, got {value!r}")
    return value


#: A duration of 0 or more seconds, kept as written.
Duration = Annotated[int | str, BeforeValidator(_check)]
#: A duration of more than 0 seconds, kept as written.
PositiveDuration = Annotated[int | str, BeforeValidator(_check_positive)]
