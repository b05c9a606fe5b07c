"""What cost reads from the store: the ledger entries that overlap a window, the attempts
running now, and the price lists (metering/cost.py prices them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from aipaas.api.finops import PriceList
from aipaas.metering.cost import CostRow, price_entries
from aipaas.metering.prices import PriceBook
from aipaas.metering.usage import running_entries
from aipaas.store import Store
from aipaas.store.ledger import LedgerEntry
from aipaas.store.ledger_windows import entries_overlapping
from aipaas.store.types import as_utc


def price_book(store: Store) -> PriceBook:
    return PriceBook(p for p in store.list_objects("PriceList", "") if isinstance(p, PriceList))


def entries_between(
    store: Store, tenant: str | None, since: datetime, until: datetime
) -> list[LedgerEntry]:
    """Attempts that ran some of [since, until) and corrections recorded in it, of ``tenant``
    (None: all), plus what the attempts running now used so far."""
    since, until = as_utc(since), as_utc(until)
    stored = entries_overlapping(store, tenant, since, until)
    return stored + running_entries(store, tenant)


def cost(
    store: Store, tenant: str | None, since: datetime, until: datetime, by: Sequence[str]
) -> list[CostRow]:
    """The cost of ``tenant``'s use (None: all tenants) in [since, until), summed by ``by``."""
    return price_entries(
        entries_between(store, tenant, since, until), price_book(store), since, until, by
    )
