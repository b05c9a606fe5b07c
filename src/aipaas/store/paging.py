"""One page of a list: its items, where the next page starts, and how many rows remain.

Pages are keyed by the table's row id: unique and growing, so a row inserted between two pages
is seen once (on a later page) and no row is seen twice, whatever is written in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    # The last row id of this page when more rows follow it (None: the list is complete).
    # With a filter applied after the query, it may be the id of a row not in ``items``.
    next_after: int | None = None
    remaining: int | None = None  # rows after this page, counted when the page was read
