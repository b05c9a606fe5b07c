"""Loading the Alibaba openb GPU cluster trace (nodes and pods CSVs) with row-level checks.

A malformed file is refused whole, naming the file, the row and the reason: nothing is
half loaded.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.types import MILLI_PER_GPU, PodRequest

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file that cannot be used; the message names file, row and reason."""


def _rows(path: Path, required: Sequence[str]) -> Iterable[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise TraceError(f"{path}: cannot read: {error.strerror}") from error
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        # Row numbers count the header as row 1, as a spreadsheet shows them.
        yield from enumerate(reader, start=2)


def _integer(path: Path, number: int, row: dict[str, str], column: str, low: int = 0) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(float(text)) if "." in text else int(text)
    except ValueError:
        raise TraceError(f"{path} row {number}: {column} is not a number: {text!r}") from None
    if value < low:
        raise TraceError(f"{path} row {number}: {column} must be >= {low}, got {value}")
    return value


def _new_name(
    path: Path, number: int, row: dict[str, str], column: str, kind: str, seen: set[str]
) -> str:
    """The row's name: present, and not seen before in the file."""
    name = (row[column] or "").strip()
    if not name:
        label = column if column == "name" else f"{column} ({kind} name)"
        raise TraceError(f"{path} row {number}: {label} is empty")
    if name in seen:
        raise TraceError(f"{path} row {number}: {kind} {name} appears twice")
    seen.add(name)
    return name


def load_nodes(path: str | Path) -> list[NodeSpec]:
    path = Path(path)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for number, row in _rows(path, NODE_COLUMNS):
        name = _new_name(path, number, row, "sn", "node", seen)
        gpus = _integer(path, number, row, "gpu")
        model = (row["model"] or "").strip()
        if gpus > 0 and not model:
            raise TraceError(f"{path} row {number}: node {name} has {gpus} GPUs but no model")
        nodes.append(
            NodeSpec(
                name=name,
                cpu_milli=_integer(path, number, row, "cpu_milli"),
                memory_mib=_integer(path, number, row, "memory_mib"),
                gpu_count=gpus,
                gpu_model=model if gpus > 0 else "",
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path: str | Path, nodes: Sequence[NodeSpec]) -> list[PodRequest]:
    """Pods in file order; GPU models named by a pod must exist in ``nodes``."""
    path = Path(path)
    known_models = {n.gpu_model for n in nodes if n.gpu_model}
    pods: list[PodRequest] = []
    seen: set[str] = set()
    for number, row in _rows(path, POD_COLUMNS):
        name = _new_name(path, number, row, "name", "pod", seen)
        count = _integer(path, number, row, "num_gpu")
        milli = _integer(path, number, row, "gpu_milli")
        spec = (row.get("gpu_spec") or "").strip()
        models = tuple(m for m in spec.split("|") if m) if spec and spec.lower() != "nan" else ()
        unknown = sorted(set(models) - known_models)
        if unknown:
            raise TraceError(
                f"{path} row {number}: unknown GPU model {', '.join(unknown)} in gpu_spec "
                f"(the cluster has {', '.join(sorted(known_models))})"
            )
        if count == 0:
            milli, models = 0, ()
        else:
            milli = min(milli, MILLI_PER_GPU)
            if milli == 0:
                raise TraceError(f"{path} row {number}: num_gpu is {count} but gpu_milli is 0")
            if count > 1 and milli != MILLI_PER_GPU:
                raise TraceError(
                    f"{path} row {number}: {count} GPUs must be whole (gpu_milli 1000), got {milli}"
                )
        pods.append(
            PodRequest(
                name=name,
                cpu_milli=_integer(path, number, row, "cpu_milli"),
                memory_mib=_integer(path, number, row, "memory_mib"),
                gpu_count=count,
                gpu_milli=milli,
                gpu_models=models,
            )
        )
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods
