"""Cost kept up to date between calls, for the controller's budget evaluations.

The ledger is append-only, so the cost of the entries already priced does not change unless
the prices do: a cache per (tenant, window start, dimensions) holds the rows of the entries up
to the last ledger id it read, and each call prices only the entries entered since, plus the
attempts running now (priced afresh, never kept). A change of any price list (its name or
resourceVersion) or a new window start (a new budget period) prices everything again once.
What one evaluation costs then grows with what was entered since the last one, not with the
month's ledger (benchmarks/finops_cost.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from aipaas.metering.cost import CostRow, Rows, accumulate
from aipaas.metering.cost_ledger import price_book
from aipaas.metering.prices import PriceBook
from aipaas.metering.usage import running_entries
from aipaas.store import Store
from aipaas.store.ledger_windows import entries_entered_since
from aipaas.store.types import as_utc

#: ended attempts are priced to their end: the window of the cache has no end of its own
_OPEN_END = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass
class _Kept:
    prices: tuple[tuple[str, str], ...]
    last_id: int = 0
    rows: Rows = field(default_factory=dict)


class CostCache:
    def __init__(self) -> None:
        self._kept: dict[tuple[str, datetime, tuple[str, ...]], _Kept] = {}

    def cost(
        self, store: Store, tenant: str, since: datetime, now: datetime, by: Sequence[str]
    ) -> list[CostRow]:
        """What ``cost(store, tenant, since, now, by)`` answers, from what was kept."""
        since, dims = as_utc(since), tuple(by)
        book = price_book(store)
        version = tuple((p.name, p.metadata.resource_version or "") for p in book.lists)
        key = (tenant, since, dims)
        kept = self._kept.get(key)
        if kept is None or kept.prices != version:
            # A new period or new prices: start again, and forget the tenant's other windows.
            for old in [k for k in self._kept if k[0] == tenant]:
                del self._kept[old]
            kept = self._kept[key] = _Kept(version)
        fresh, last = entries_entered_since(store, tenant, since, kept.last_id)
        accumulate(kept.rows, fresh, book, since, _OPEN_END, dims)
        kept.last_id = max(kept.last_id, last)
        return _with_running(kept.rows, store, tenant, book, since, now, dims)


def _with_running(
    kept: Rows,
    store: Store,
    tenant: str,
    book: PriceBook,
    since: datetime,
    now: datetime,
    dims: tuple[str, ...],
) -> list[CostRow]:
    rows: Rows = {key: replace(row, key=dict(row.key), tasks=set()) for key, row in kept.items()}
    accumulate(rows, running_entries(store, tenant), book, since, as_utc(now), dims)
    return [rows[key] for key in sorted(rows)]
