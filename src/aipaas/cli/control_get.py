"""`aipaas get`: list or show objects, filtered (-l, --phase, --queue), in any output format,
and watched as they change (-w, from the API's watch stream)."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from aipaas.api.registry import resolve_kind
from aipaas.cli import complete, queue_views, selectors
from aipaas.cli.failure import client, fail
from aipaas.cli.output import Output, WatchPrinter, parse_output, print_items
from aipaas.errors import AipaasError

Tenant = Annotated[
    str | None,
    typer.Option(
        "--tenant", "-t", help="Tenant (platform admins).", autocompletion=complete.tenants
    ),
]
ChunkSize = Annotated[
    int | None,
    typer.Option("--chunk-size", min=1, max=5000, help="Items per request (pages are followed)."),
]
Selector = Annotated[
    str | None,
    typer.Option("--selector", "-l", help="Labels: key=value,key!=value,key,!key,key in (a,b)."),
]
Phase = Annotated[
    str | None,
    typer.Option("--phase", help="Only these phases (comma-separated): Running,Pending."),
]
Queue = Annotated[
    str | None, typer.Option("--queue", help="Only jobs of these queues (comma-separated).")
]
GetOutput = Annotated[
    str,
    typer.Option("--output", "-o", help="table, wide, name, json, yaml or jsonpath=TEMPLATE."),
]


def get(
    kind: Annotated[
        str,
        typer.Argument(
            help="job, jobs, queue, tenant, user, node... or KIND/NAME",
            autocompletion=complete.kinds,
        ),
    ],
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Names (default: all).", autocompletion=complete.names),
    ] = None,
    output: GetOutput = "table",
    tenant: Tenant = None,
    selector: Selector = None,
    phase: Phase = None,
    queue: Queue = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Then print changes as they come.")
    ] = False,
    watch_only: Annotated[bool, typer.Option("--watch-only", help="Print only changes.")] = False,
    output_watch_events: Annotated[
        bool, typer.Option("--output-watch-events", help="With -w: an EVENT column.")
    ] = False,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="With -w: stop watching after 30s, 10m...")
    ] = None,
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="Tables without their header line.")
    ] = False,
    chunk_size: ChunkSize = None,
) -> None:
    """List objects of a kind, or show some by name."""
    wanted = list(names or [])
    if "/" in kind:
        kind, _, first = kind.partition("/")
        wanted.insert(0, first)
    shape = parse_output(output)
    if no_headers:
        shape = Output(shape.format, shape.template, headers=False)
    try:
        keep = selectors.make_filter(selector, phase, queue)
    except selectors.SelectorError as err:
        fail(str(err))
    if watch or watch_only:
        seconds = None if timeout is None else duration_seconds(timeout)
        if timeout is not None and seconds is None:
            fail(f"--timeout {timeout!r}: use a duration such as 30s, 10m")
        _watch(
            kind,
            wanted,
            shape,
            tenant,
            keep,
            initial=not watch_only,
            events=output_watch_events,
            timeout=seconds,
        )
        return
    with client() as api:
        if kind.lower() in ("device", "devices"):
            items = api.devices(page_size=chunk_size)
            _print_devices(items, shape)
            return
        if wanted:
            items = [api.get(kind, name, tenant) for name in wanted]
        else:
            items = api.list(kind, tenant, page_size=chunk_size)
    items = [item for item in items if keep(item)]
    single = len(wanted) == 1 and len(items) == 1
    if _is_queue(kind) and shape.tabular:
        queue_views.print_queues(items, wide=shape.wide, headers=shape.headers)
        return
    print_items(items, shape, single=single)


def _watch(
    kind: str,
    names: list[str],
    shape: Output,
    tenant: str | None,
    keep: Any,
    *,
    initial: bool,
    events: bool,
    timeout: float | None,
) -> None:
    if len(names) > 1:
        fail("--watch takes one name, or none (all)")
    try:
        canonical = resolve_kind(kind)
    except AipaasError:
        canonical = kind  # the server's answer names the unknown kind
    printer = WatchPrinter(canonical, shape, events=events)
    first: list[tuple[str, dict[str, Any]]] = []
    started = False
    with client() as api:
        name = names[0] if names else None
        stream = api.watch(kind, name, tenant, bookmarks=True, timeout=timeout)
        try:
            for change in stream:
                kind_of, obj = change["type"], change.get("object") or {}
                if kind_of == "BOOKMARK":
                    if not started:
                        started = True
                        printer.first(first if initial else [])
                    continue
                if not keep(obj):
                    continue
                if started:
                    printer.change(kind_of, obj)
                else:
                    first.append((kind_of, obj))
        except KeyboardInterrupt:
            return


def duration_seconds(text: str) -> int | None:
    """``30s``, ``10m``, ``2h``, ``1d`` or ``1h30m`` (a bare number is seconds), in whole
    seconds; None when it is not a positive duration."""
    match = re.fullmatch(r"(?:(\d+)([smhd]))+|(\d+)", text.strip())
    if match is None:
        return None
    if match.group(3) is not None:
        total = int(match.group(3))
    else:
        total = sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", text))
    return total if total > 0 else None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _is_queue(kind: str) -> bool:
    try:
        return resolve_kind(kind) == "Queue"
    except AipaasError:
        return False  # an unknown kind: the server's answer names it


def _print_devices(rows: list[dict[str, Any]], output: Output) -> None:
    if not output.tabular:
        print_items(rows, output, single=False)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None)
    headers = ("NODE", "DEVICE", "MODEL", "NVLINK", "NUMA", "PCIE ROOT", "MEMORY", "STATE")
    for header in (*headers, "HOLDERS"):
        table.add_column(header)
    for row in rows:
        attributes = row["attributes"]

        def attribute(name: str, attributes: dict[str, Any] = attributes) -> str:
            for key, value in attributes.items():
                if key == name or key.endswith("/" + name):
                    return str(value)
            return ""

        table.add_row(
            row["node"],
            row["device"],
            attribute("model") or attribute("productName"),
            attribute("nvlinkDomain"),
            attribute("numaNode"),
            attribute("pcieRoot"),
            row["capacity"].get("memory")
            or next((v for k, v in row["capacity"].items() if k.endswith("/memory")), ""),
            row["state"],
            ", ".join(row["holders"]) or "-",
        )
    Console(width=200).print(table)
