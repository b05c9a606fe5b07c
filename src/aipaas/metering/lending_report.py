"""Lending read from the usage ledger (metering/usage.py, store/ledger.py): the spot GPU-hours
on each lending pool, per borrower, ended attempts and running ones, and what each side owes or
is owed (autoscale/lending.py). Reads; writes nothing: the ledger stays the one record, and the
lending is a view of it (a ledger correction corrects the lending as well).
"""

from __future__ import annotations

from aipaas.api.pool import NodePool
from aipaas.autoscale.lending import LendingLine, LendingTerms, lending_lines, terms_of
from aipaas.metering.usage import running_entries
from aipaas.store import Store
from aipaas.store.ledger import list_entries


def lending_terms(store: Store) -> dict[str, LendingTerms]:
    """The lending pools' terms by pool name."""
    pools = [p for p in store.list_objects("NodePool", "") if isinstance(p, NodePool)]
    found = (terms_of(pool) for pool in pools)
    return {terms.pool: terms for terms in found if terms is not None}


def lending_report(store: Store) -> list[LendingLine]:
    terms = lending_terms(store)
    if not terms:
        return []
    entries = [*list_entries(store), *running_entries(store, None)]
    return lending_lines(entries, terms)
