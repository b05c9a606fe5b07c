"""Numbers as people read them in a table: ages (5m, 3h12m, 2d), durations, GPU counts and
byte quantities (1.5Gi). Pure functions; ``now`` is a parameter so that tests fix it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aipaas.api.quantity import parse_quantity

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time as the server writes it (``...Z`` or ``+00:00``); None if absent or
    unreadable."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def span(seconds: float) -> str:
    """kubectl's way: the two largest units under a day, days alone past two days
    (``45s``, ``5m12s``, ``3h4m``, ``36h``, ``3d``)."""
    total = max(int(seconds), 0)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        minutes, rest = divmod(total, 60)
        return f"{minutes}m{rest}s" if rest and minutes < 10 else f"{minutes}m"
    if total < 2 * 86400:
        hours, rest = divmod(total, 3600)
        minutes = rest // 60
        return f"{hours}h{minutes}m" if minutes and hours < 8 else f"{hours}h"
    return f"{total // 86400}d"


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """How long ago ``timestamp`` was; "-" when unknown."""
    moment = parse_time(timestamp)
    if moment is None:
        return "-"
    current = now or datetime.now(UTC)
    return span((current - moment).total_seconds())


def duration(start: str | None, end: str | None, now: datetime | None = None) -> str:
    """From ``start`` to ``end`` (or to now while running); "-" before it started."""
    began = parse_time(start)
    if began is None:
        return "-"
    finished = parse_time(end) or now or datetime.now(UTC)
    return span((finished - began).total_seconds())


def count(value: float) -> str:
    """1, 2, 0.5: no trailing zeros."""
    return f"{value:g}"


def quantity_bytes(value: Any) -> str:
    """A byte amount given as a number or a quantity text ("17179869184", "16Gi", "1500M")
    in the largest binary unit that keeps it readable (``16Gi``, ``1.5Gi``)."""
    try:
        amount = float(parse_quantity(str(value)))
    except (ValueError, ArithmeticError):
        return str(value)
    for suffix, size in _BINARY:
        if amount >= size:
            shown = amount / size
            return f"{shown:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{int(amount)}"


def cores(value: Any) -> str:
    """CPU as cores: "1500m" -> 1.5, "2" -> 2."""
    try:
        amount = float(parse_quantity(str(value)))
    except (ValueError, ArithmeticError):
        return str(value)
    return f"{amount:.3f}".rstrip("0").rstrip(".")
