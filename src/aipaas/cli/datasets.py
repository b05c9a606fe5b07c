"""Dataset commands: `aipaas get datasets` (size, cached bytes per node pool, hit ratio; the
columns are registered here), `aipaas describe dataset NAME` (the generic describe: the status
lists every node's cache, then the load and eviction events) and `aipaas dataset warm NAME
[--nodes a,b]` (the controller loads it there now; the events say when each load ends).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

import typer

from aipaas.cli import columns, failure
from aipaas.cli.columns import Column, meta, status

datasets_app = typer.Typer(help="Datasets cached on the nodes.", no_args_is_help=True)
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in _UNITS:
        if amount < 1024 or unit == _UNITS[-1]:
            return f"{amount:.0f}{unit}" if unit == "B" else f"{amount:.1f}{unit}"
        amount /= 1024
    return f"{amount:.1f}PiB"


def size(dataset: dict[str, Any]) -> str:
    measured = (dataset.get("status") or {}).get("sizeBytes")
    if measured is not None:
        return human_bytes(measured)
    return str((dataset.get("spec") or {}).get("size") or "-")


def cached_per_pool(dataset: dict[str, Any]) -> str:
    """``pool=bytes`` per node pool (nodes outside pools under ``-``), complete copies first."""
    per_pool: dict[str, int] = defaultdict(int)
    for node in (dataset.get("status") or {}).get("nodes") or []:
        per_pool[node.get("pool") or "-"] += int(node.get("bytes") or 0)
    return ",".join(f"{pool}={human_bytes(b)}" for pool, b in sorted(per_pool.items()))


def cached_nodes(dataset: dict[str, Any]) -> str:
    nodes = (dataset.get("status") or {}).get("nodes") or []
    return ",".join(n["node"] + ("" if n.get("complete") else "(partial)") for n in nodes)


def hit_ratio(dataset: dict[str, Any]) -> str:
    state = dataset.get("status") or {}
    hits, misses = int(state.get("hits") or 0), int(state.get("misses") or 0)
    return f"{100 * hits / (hits + misses):.0f}%" if hits + misses else "-"


def _counter(key: str) -> columns.Getter:
    return lambda o: human_bytes((o.get("status") or {}).get(key, 0))


def register(app: typer.Typer) -> None:
    columns.register(
        "Dataset",
        [
            Column("NAME", meta("name")),
            Column("TENANT", meta("tenant")),
            Column("PHASE", status("phase", "Pending")),
            Column("SIZE", size),
            Column("CACHED", cached_per_pool),
            Column("HIT RATIO", hit_ratio),
            Column("SOURCE", lambda o: o["spec"]["source"]),
            Column("NODES", cached_nodes, wide_only=True),
            Column("FROM SOURCE", _counter("bytesFromSource"), wide_only=True),
            Column("FROM CACHE", _counter("bytesFromCache"), wide_only=True),
            Column("MESSAGE", status("message"), wide_only=True),
        ],
    )
    columns.register(
        "Secret",
        [
            Column("NAME", meta("name")),
            Column("TENANT", meta("tenant")),
            Column("KEYS", lambda o: ",".join(sorted((o["spec"].get("data") or {}).keys()))),
            Column("AGE", columns.age),
        ],
    )
    datasets_app.command("warm")(warm)
    app.add_typer(datasets_app, name="dataset")


def warm(
    name: Annotated[str, typer.Argument(help="The dataset.")],
    nodes: Annotated[
        str | None,
        typer.Option("--nodes", help="Comma-separated nodes; unset: as many as its policy's."),
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Tenant (admins).")] = None,
) -> None:
    """Load a dataset into node caches now (prefetch on demand)."""
    wanted = [n.strip() for n in (nodes or "").split(",") if n.strip()]
    with failure.client() as client:
        client.warm_dataset(name, wanted, tenant)
    where = ", ".join(wanted) if wanted else "the nodes its cache policy allows"
    print(f"dataset/{name} warming on {where}")
