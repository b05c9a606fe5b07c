"""How long cost takes over a month of ledger (issue 15): what one budget evaluation of a tenant
and one ``GET /api/v1/cost`` pay.

A SQLite store (temporary folder) gets ``entries`` attempt entries of one tenant spread over
March 2026 (random starts, 10 minutes to 12 hours long, 1-8 GPUs of two models, some on the spot
tier), and three price lists with changes on the 10th at noon and on the 20th. Timed: reading
the month's entries from the store (``entries_between``), pricing them (``price_entries``) by
queue and day (what a budget evaluation asks) and by job, the whole ``cost`` call, and the
budgets' kept cost (metering/cost_cache.py): its first evaluation, and the next after 100 more
entries. Prints a table; ``--write`` puts it in docs/finops.md between its markers.

    .venv/bin/python benchmarks/finops_cost.py --entries 10000 100000 --seed 7 [--write]
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aipaas.api.registry import parse_object
from aipaas.api.tenancy import Role
from aipaas.metering.attribution import attribution
from aipaas.metering.cost import price_entries
from aipaas.metering.cost_cache import CostCache
from aipaas.metering.cost_ledger import cost, entries_between, price_book
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.store.ledger import ATTEMPT, LedgerEntry, insert_entries
from aipaas.tenancy.principal import Principal

MONTH = datetime(2026, 3, 1, tzinfo=UTC)
END = datetime(2026, 4, 1, tzinfo=UTC)
PRICES = [
    ("early", "2026-01-01", "2026-03-10T12:00:00Z", 2.0),
    ("mid", "2026-03-10T12:00:00Z", "2026-03-20", 2.5),
    ("late", "2026-03-20", None, 3.0),
]
DOC = Path(__file__).parents[1] / "docs" / "finops.md"
BEGIN, FINISH = "<!-- finops_cost begin -->", "<!-- finops_cost end -->"


def setup(store: Store) -> None:
    admin = ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN))
    admin.apply_text("apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n")
    for name, start, until, price in PRICES:
        spec: dict[str, object] = {
            "validFrom": start,
            "gpu": [{"model": "H100", "pricePerHour": price}, {"model": "*", "pricePerHour": 1}],
            "cpuCoreHour": 0.05,
            "tierFactors": {"spot": 0.4},
        }
        if until:
            spec["validUntil"] = until
        obj = parse_object(
            {
                "apiVersion": "aipaas/v1",
                "kind": "PriceList",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
        store.create(obj)


def ledger(count: int, rng: random.Random) -> list[LedgerEntry]:
    entries = []
    span = (END - MONTH).total_seconds()
    for index in range(count):
        start = MONTH + timedelta(seconds=rng.uniform(0, span - 12 * 3600))
        end = start + timedelta(seconds=rng.uniform(600, 12 * 3600))
        gpus = rng.choice((1, 2, 4, 8))
        hours = (end - start).total_seconds() / 3600
        entries.append(
            LedgerEntry(
                kind=ATTEMPT,
                tenant="acme",
                queue=f"q{index % 20}",
                user=f"u{index % 50}",
                job_name=f"job-{index}",
                job_uid=f"uid-{index}",
                task="w-0",
                attempt=0,
                gpu_model=rng.choice(("H100", "A100")),
                gpu_milli=gpus * 1000,
                cpu_milli=gpus * 8000,
                memory_mib=gpus * 65536,
                started_at=start,
                ended_at=end,
                gpu_hours=hours * gpus,
                cpu_hours=hours * gpus * 8,
                memory_gib_hours=hours * gpus * 64,
                recorded_by="controller",
                recorded_at=end,
                reason=attribution("", "spot" if rng.random() < 0.2 else ""),
                attempt_key=f"uid-{index}/w-0/0",
            )
        )
    return entries


def timed(function: object, *args: object) -> tuple[float, object]:
    began = time.perf_counter()
    result = function(*args)  # type: ignore[operator]
    return time.perf_counter() - began, result


def measure(count: int, seed: int) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(f"sqlite:///{Path(folder) / 'aipaas.db'}")
        setup(store)
        entries = ledger(count, random.Random(seed))
        with store.transaction() as tx:
            for first in range(0, len(entries), 5000):
                insert_entries(tx, entries[first : first + 5000])
        read_s, read = timed(entries_between, store, "acme", MONTH, END)
        book = price_book(store)
        assert isinstance(read, list)
        budget_s, rows = timed(price_entries, read, book, MONTH, END, ("queue", "day"))
        jobs_s, _ = timed(price_entries, read, book, MONTH, END, ("job",))
        whole_s, _ = timed(cost, store, "acme", MONTH, END, ("tenant",))
        cache = CostCache()
        cold_s, _ = timed(cache.cost, store, "acme", MONTH, END, ("queue", "day"))
        more = ledger(count + 100, random.Random(seed + 1))[count:]
        with store.transaction() as tx:
            insert_entries(tx, more)
        warm_s, _ = timed(cache.cost, store, "acme", MONTH, END, ("queue", "day"))
        store.close()
    assert isinstance(rows, list)
    total = sum(r.cost for r in rows)
    return [
        f"{count:,}",
        f"{read_s:.2f}",
        f"{budget_s:.2f}",
        f"{jobs_s:.2f}",
        f"{whole_s:.2f}",
        f"{count / max(whole_s, 1e-9):,.0f}",
        f"{cold_s:.2f}",
        f"{warm_s * 1000:.0f}",
        f"{total:,.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write", action="store_true", help="update docs/finops.md")
    options = parser.parse_args()
    header = [
        "entries in the month",
        "read (s)",
        "price by queue, day (s)",
        "price by job (s)",
        "whole cost call (s)",
        "entries/s",
        "budget, first evaluation (s)",
        "budget, next with 100 new entries (ms)",
        "month's cost (USD)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for count in options.entries:
        lines.append("| " + " | ".join(measure(count, options.seed)) + " |")
    table = "\n".join(lines)
    print(table)
    if options.write:
        text = DOC.read_text()
        block = f"{BEGIN}\n{table}\n\nseed {options.seed}; `benchmarks/finops_cost.py`\n{FINISH}"
        DOC.write_text(re.sub(f"{BEGIN}.*?{FINISH}", block, text, flags=re.S))


if __name__ == "__main__":
    main()
