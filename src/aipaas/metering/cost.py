"""Cost: the usage ledger priced with the price valid at each instant, summed by what is asked.

An attempt from 09:00 to 15:00 with a price change at 12:00 is priced 09-12 under the old list
and 12-15 under the new one; asked by day, an attempt across midnight is split there too. A
correction has no interval: it is priced at the instant it was recorded. Pure: entries and
the price book are handed in (metering/cost_ledger.py reads them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from aipaas.api.finops import PriceList
from aipaas.metering.attribution import parse
from aipaas.metering.prices import PriceBook, Priced, Rates, hourly, hours_cost
from aipaas.store.ledger import CORRECTION, LedgerEntry
from aipaas.store.types import as_utc

#: what cost may be summed by, as the API and the CLI name it
DIMENSIONS: Final = ("tenant", "queue", "user", "job", "model", "day", "pool", "tier")


@dataclass
class CostRow:
    key: dict[str, str]
    currency: str
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    memory_gib_hours: float = 0.0
    cost: float = 0.0
    tasks: set[str] = field(default_factory=set)

    def wire(self) -> dict[str, object]:
        return {
            **self.key,
            "currency": self.currency,
            "gpuHours": round(self.gpu_hours, 6),
            "cpuHours": round(self.cpu_hours, 6),
            "memoryGiBHours": round(self.memory_gib_hours, 6),
            "cost": round(self.cost, 6),
            "tasks": len(self.tasks),
        }


def days(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
    """[start, end) cut at each midnight UTC."""
    left = start
    while left < end:
        midnight = datetime(left.year, left.month, left.day, tzinfo=UTC) + timedelta(days=1)
        right = min(midnight, end)
        yield left, right
        left = right


def _key(
    entry: LedgerEntry, by: Sequence[str], day: datetime, pool: str, tier: str
) -> tuple[str, ...]:
    values = {
        "tenant": entry.tenant,
        "queue": entry.queue,
        "user": entry.user,
        "job": entry.job_name,
        "model": entry.gpu_model,
        "day": day.date().isoformat(),
        "pool": pool,
        "tier": tier,
    }
    return tuple(values[name] for name in by)


def price_entries(
    entries: Iterable[LedgerEntry],
    book: PriceBook,
    since: datetime,
    until: datetime,
    by: Sequence[str],
) -> list[CostRow]:
    """The cost of ``entries`` inside [since, until), summed by ``by`` (and currency)."""
    rows: Rows = {}
    accumulate(rows, entries, book, since, until, by)
    return [rows[key] for key in sorted(rows)]


#: (*values of ``by``, currency) -> the row
Rows = dict[tuple[str, ...], CostRow]


def accumulate(
    rows: Rows,
    entries: Iterable[LedgerEntry],
    book: PriceBook,
    since: datetime,
    until: datetime,
    by: Sequence[str],
) -> None:
    """Add the cost of ``entries`` inside [since, until) to ``rows`` (metering/cost_cache.py
    keeps them between calls)."""
    since, until = as_utc(since), as_utc(until)

    def row(key: tuple[str, ...], currency: str) -> CostRow:
        found = rows.get((*key, currency))
        if found is None:
            found = rows[(*key, currency)] = CostRow(dict(zip(by, key, strict=True)), currency)
        return found

    for entry in entries:
        if entry.kind == CORRECTION:
            moment = as_utc(entry.recorded_at)
            if not since <= moment < until:
                continue
            prices = book.at(entry.tenant, moment)
            target = row(_key(entry, by, moment, "", ""), _currency(prices))
            target.gpu_hours += entry.gpu_hours
            target.cpu_hours += entry.cpu_hours
            target.memory_gib_hours += entry.memory_gib_hours
            target.cost += hours_cost(
                prices, entry.gpu_model, entry.gpu_hours, entry.cpu_hours, entry.memory_gib_hours
            )
            continue
        if entry.started_at is None or entry.ended_at is None:
            continue
        start, end = max(as_utc(entry.started_at), since), min(as_utc(entry.ended_at), until)
        pool, tier = parse(entry.reason)
        rates = Rates(
            entry.gpu_model, entry.gpu_milli, entry.cpu_milli, entry.memory_mib, pool, tier
        )
        for day_start, day_end in days(start, end):
            for piece in book.split(entry.tenant, day_start, day_end):
                _add(
                    row(_key(entry, by, day_start, pool, tier), _currency(piece.prices)),
                    piece,
                    rates,
                    entry,
                )


def _add(target: CostRow, piece: Priced, rates: Rates, entry: LedgerEntry) -> None:
    hours = piece.hours
    target.gpu_hours += hours * rates.gpu_milli / 1000
    target.cpu_hours += hours * rates.cpu_milli / 1000
    target.memory_gib_hours += hours * rates.memory_mib / 1024
    target.cost += hours * hourly(piece.prices, rates)
    target.tasks.add(entry.attempt_key or f"{entry.job_uid}/{entry.task}/{entry.attempt}")


def _currency(prices: PriceList | None) -> str:
    return prices.spec.currency if prices is not None else ""


def totals(rows: Iterable[CostRow]) -> dict[str, float]:
    """The sum of ``rows`` per currency ("" : use no price priced)."""
    sums: dict[str, float] = defaultdict(float)
    for row in rows:
        sums[row.currency] += row.cost
    return {currency: round(amount, 6) for currency, amount in sorted(sums.items())}
