"""Cost over time, per tenant and queue, for the dashboard's chart: the window cut into buckets,
each priced as GET /api/v1/cost prices it (metering/cost.py: the price valid at each instant,
split at price changes), summed from the window's start to each bucket's end.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from aipaas.metering.cost import price_entries, totals
from aipaas.metering.cost_ledger import entries_between, price_book
from aipaas.metering.prices import PriceBook
from aipaas.store import Store
from aipaas.store.ledger import CORRECTION, LedgerEntry
from aipaas.store.types import as_utc


def cost_timeline(store: Store, tenant: str | None, window: int, points: int) -> dict[str, Any]:
    """The cost of ``tenant``'s use (None: every tenant's) over the last ``window`` seconds."""
    end = store.clock.now()
    start = end - timedelta(seconds=window)
    entries = entries_between(store, tenant, start, end)
    edges = [start + timedelta(seconds=window * i / points) for i in range(points)] + [end]
    return bucketed_cost(entries, price_book(store), edges)


def bucketed_cost(
    entries: Sequence[LedgerEntry], book: PriceBook, edges: Sequence[datetime]
) -> dict[str, Any]:
    """Cumulative cost per (tenant, queue, currency) at the end of each bucket between
    ``edges``; each bucket prices only the entries that overlap it."""
    points = len(edges) - 1
    spent: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0] * points)
    all_rows = []
    members = _by_bucket(entries, edges)
    for i in range(points):
        left, right = edges[i], edges[i + 1]
        rows = price_entries(members[i], book, left, right, ("tenant", "queue"))
        all_rows.extend(rows)
        for row in rows:
            spent[(row.key["tenant"], row.key["queue"], row.currency)][i] += row.cost
    series = []
    for (tenant, queue, currency), amounts in sorted(spent.items()):
        if not currency:
            continue  # use no price list priced: it costs nothing, in no currency
        running, cumulative = 0.0, []
        for amount in amounts:
            running += amount
            cumulative.append(round(running, 6))
        series.append({"tenant": tenant, "queue": queue, "currency": currency, "cost": cumulative})
    return {
        "start": edges[0].isoformat(),
        "end": edges[-1].isoformat(),
        "times": [edge.isoformat() for edge in edges[1:]],
        "series": series,
        "total": totals(all_rows),
    }


def _by_bucket(
    entries: Sequence[LedgerEntry], edges: Sequence[datetime]
) -> list[list[LedgerEntry]]:
    """The entries that overlap each bucket [edges[i], edges[i+1]) (a correction: the bucket it
    was recorded in), placed by bisection: the work grows with the buckets an entry spans."""
    members: list[list[LedgerEntry]] = [[] for _ in range(len(edges) - 1)]
    last = len(edges) - 2
    for entry in entries:
        if entry.kind == CORRECTION:
            first = final = bisect_right(edges, as_utc(entry.recorded_at)) - 1
        elif entry.started_at is None or entry.ended_at is None:
            continue
        else:
            first = bisect_right(edges, as_utc(entry.started_at)) - 1
            final = bisect_left(edges, as_utc(entry.ended_at)) - 1
        for i in range(max(first, 0), min(final, last) + 1):
            members[i].append(entry)
    return members
