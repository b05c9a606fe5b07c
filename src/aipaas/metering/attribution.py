"""What prices an attempt besides its resources: the node pool it ran in and its job's
priority class (its tier: spot, low, high...). The controller writes both into the ledger
entry's ``reason`` (empty for attempts otherwise; a correction's reason is its author's text),
as ``pool=NAME;tier=NAME``, so the ledger needs no column of its own for them.
"""

from __future__ import annotations

from typing import Final

#: the node label naming its pool (as controller/workload.py and api/pool.py read it)
POOL_LABEL: Final = "aipaas.dev/pool"


def attribution(pool: str, tier: str) -> str:
    """The ``reason`` text of an attempt; "" when it ran in no pool and named no class."""
    parts = [f"{key}={value}" for key, value in (("pool", pool), ("tier", tier)) if value]
    return ";".join(parts)


def parse(reason: str) -> tuple[str, str]:
    """(pool, tier) of an attempt entry's ``reason``; unknown parts are ignored."""
    found: dict[str, str] = {}
    for part in reason.split(";"):
        key, sep, value = part.partition("=")
        if sep and key in ("pool", "tier"):
            found[key] = value
    return found.get("pool", ""), found.get("tier", "")
