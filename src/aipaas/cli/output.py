"""How `get` prints objects: ``-o table`` (the default), ``wide``, ``name``, ``json``,
``yaml`` or ``jsonpath=TEMPLATE`` (aipaas/jsonpath.py); the table's columns are cli/columns.py's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from aipaas import jsonpath
from aipaas.cli import columns
from aipaas.cli.failure import fail

FORMATS = ("table", "wide", "name", "json", "yaml", "jsonpath=TEMPLATE")


@dataclass(frozen=True)
class Output:
    format: str  # table, wide, name, json, yaml, jsonpath
    template: str = ""
    headers: bool = True  # --no-headers leaves them out of tables

    @property
    def tabular(self) -> bool:
        return self.format in ("table", "wide")

    @property
    def wide(self) -> bool:
        return self.format == "wide"


def parse_output(text: str) -> Output:
    """The -o value; exits with the usage code (2) naming the choices for anything else."""
    name, _, template = text.partition("=")
    if name == "jsonpath" and template:
        template = template.strip()
        if len(template) >= 2 and template[0] == template[-1] and template[0] in "'\"":
            template = template[1:-1]  # quoted once more than the shell took off
        try:
            jsonpath.render(template, {})
        except jsonpath.JsonPathError as err:
            fail(f"-o jsonpath: {err}")
        return Output("jsonpath", template)
    if text in ("table", "wide", "name", "json", "yaml"):
        return Output(text)
    fail(f"--output {text!r}: use one of {', '.join(FORMATS)}")


def name_of(item: dict[str, Any]) -> str:
    """``job/hello``: what `-o name` prints, and what other commands take."""
    return f"{str(item.get('kind', '')).lower()}/{(item.get('metadata') or {}).get('name')}"


def print_items(items: list[dict[str, Any]], output: Output, *, single: bool) -> None:
    if output.format == "json":
        print(json.dumps(items[0] if single else items, indent=2))
    elif output.format == "yaml":
        print(yaml.safe_dump(items[0] if single else items, sort_keys=False).rstrip())
    elif output.format == "name":
        for item in items:
            print(name_of(item))
    elif output.format == "jsonpath":
        data = items[0] if single else {"apiVersion": "v1", "kind": "List", "items": items}
        try:
            text = jsonpath.render(output.template, data)
            print(text, end="" if text.endswith("\n") else "\n")
        except jsonpath.JsonPathError as err:
            fail(f"-o jsonpath: {err}")
    else:
        print_table(items, wide=output.wide, headers=output.headers)


def print_table(items: list[dict[str, Any]], *, wide: bool, headers: bool = True) -> None:
    if not items:
        print("No objects found.", file=sys.stderr)
        return
    table = Table(box=None, show_header=headers)
    shown = columns.columns_for(str(items[0].get("kind", "")), wide=wide)
    for column in shown:
        table.add_column(column.header)
    for item in items:
        table.add_row(*columns.row(shown, item))
    Console(width=240 if wide else 200).print(table)


class WatchPrinter:
    """`get -w`: the first state as a table, then one line per change, in the same columns
    (widths from the first state); other formats print one document per change."""

    GAP = "   "

    def __init__(self, kind: str, output: Output, *, events: bool) -> None:
        self.output = output
        self.events = events  # an EVENT column (ADDED, MODIFIED, DELETED) first
        self.shown = columns.columns_for(kind, wide=output.wide)
        self.widths: list[int] | None = None

    def first(self, changes: list[tuple[str, dict[str, Any]]]) -> None:
        if not self.output.tabular:
            for change in changes:
                self.change(*change)
            return
        headers = (["EVENT"] if self.events else []) + [c.header for c in self.shown]
        rows = [self._cells(kind, obj) for kind, obj in changes]
        self.widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        for cells in [headers, *rows] if self.output.headers else rows:
            self._line(cells)

    def change(self, kind: str, obj: dict[str, Any]) -> None:
        if self.output.format == "json":
            print(json.dumps({"type": kind, "object": obj}), flush=True)
        elif self.output.format == "yaml":
            print("---\n" + yaml.safe_dump({"type": kind, "object": obj}).rstrip(), flush=True)
        elif self.output.format == "name":
            print(name_of(obj), flush=True)
        elif self.output.format == "jsonpath":
            print(jsonpath.render(self.output.template, obj), flush=True)
        else:
            if self.widths is None:
                self.first([])
            self._line(self._cells(kind, obj))

    def _cells(self, kind: str, obj: dict[str, Any]) -> list[str]:
        return ([kind] if self.events else []) + columns.row(self.shown, obj)

    def _line(self, cells: list[str]) -> None:
        widths = self.widths or [0] * len(cells)
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        print(self.GAP.join(padded).rstrip(), flush=True)
