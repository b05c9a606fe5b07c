"""Helpers of the benchmarks: a function run in a fresh process (its peak RSS reported), and
the databases a run can use."""

from __future__ import annotations

import multiprocessing
import resource
import sys
from collections.abc import Callable
from typing import Any

from aipaas.store.pgtest import unavailable_reason


def _child(target: Callable[..., dict[str, Any]], args: tuple[Any, ...], queue: Any) -> None:
    result = target(*args)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["peak_rss_mib"] = peak_kib / 1024 if sys.platform != "darwin" else peak_kib / 2**20
    queue.put(result)


def in_fresh_process(target: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``target(*args)`` returns a dict of measurements; peak_rss_mib is added to it."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(target, args, queue))
    process.start()
    result: dict[str, Any] = queue.get()
    process.join()
    return result


def usable_databases(spec: str) -> list[str]:
    """The databases of a comma-separated ``--db`` that can run here; PostgreSQL is left out,
    saying why, when its server binaries are missing."""
    usable = []
    for db in spec.split(","):
        if db == "postgresql" and unavailable_reason():
            print(f"postgresql skipped: {unavailable_reason()}")
            continue
        usable.append(db)
    return usable
