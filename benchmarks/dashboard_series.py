"""What the dashboard's series cost the server: GET /api/v1/dashboard/timeline and .../cost,
called in process on a SQLite store holding a ledger of random attempts over a day.

    nice -n 10 .venv/bin/python benchmarks/dashboard_series.py [--entries 10000] [--seed 7]

Attempts: ``--entries`` of 5 tenants and 20 queues, each starting at a random time in the last
day and running 1 minute to 2 hours (cut at now), 4 GPUs and 8 cores each, one price list. Each
figure is the median of ``--repeats`` calls for a day's window in 60 points, for all tenants (a
platform admin) and for one.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from aipaas.api.finops import PriceList
from aipaas.server.dashboard_cost import cost_timeline
from aipaas.server.dashboard_timeline import timeline
from aipaas.store import Store
from aipaas.store.ledger import ATTEMPT, LedgerEntry, insert_entries

DAY = 86400


def filled_store(entries: int, seed: int) -> Store:
    rng = random.Random(seed)
    store = Store.open(f"sqlite:///{tempfile.mkdtemp(prefix='aipaas-bench-')}/store.db")
    spec = {
        "validFrom": "2020-01-01",
        "cpuCoreHour": 0.05,
        "gpu": [{"model": "*", "pricePerHour": 2}],
    }
    store.create(PriceList.model_validate({"metadata": {"name": "standard"}, "spec": spec}))
    now = store.clock.now()
    rows = []
    for i in range(entries):
        start = now - timedelta(seconds=rng.uniform(0, DAY))
        end = min(start + timedelta(seconds=rng.uniform(60, 7200)), now)
        rows.append(
            LedgerEntry(
                kind=ATTEMPT,
                tenant=f"t{i % 5}",
                queue=f"q{i % 20}",
                user="u",
                job_name=f"j{i}",
                job_uid=f"uid-{i}",
                task="w-0",
                attempt=0,
                gpu_model="H100",
                gpu_milli=4000,
                cpu_milli=8000,
                memory_mib=1024,
                started_at=start,
                ended_at=end,
                gpu_hours=0,
                cpu_hours=0,
                memory_gib_hours=0,
                recorded_by="controller",
                recorded_at=end,
                attempt_key=f"uid-{i}/w-0/0",
            )
        )
    with store.transaction() as tx:
        insert_entries(tx, rows)
    return store


def median_ms(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    store = filled_store(args.entries, args.seed)
    print(f"{args.entries:,} ledger entries over a day, seed {args.seed}; a day in 60 points")
    print("| series | tenants | median ms |")
    print("| --- | --- | ---: |")
    for name, series in (("timeline", timeline), ("cost", cost_timeline)):
        for label, tenant in (("all", None), ("one", "t1")):
            ms = median_ms(partial(series, store, tenant, DAY, 60), args.repeats)
            print(f"| {name} | {label} | {ms:,.0f} |")


if __name__ == "__main__":
    main()
