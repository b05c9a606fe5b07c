"""The openb replay's sizes and the high class's floor (benchmarks/_openb_floor.py)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))

from _openb_floor import floor_table, high_floor
from batch_openb import FULL, QUICK, WIDE, Setup, Size

POD_COLUMNS = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
]


def _trace(folder: Path, pods: list[tuple[str, str, int, int]]) -> Path:
    """One node of one GPU; ``pods``: (name, QoS, created, deleted), one whole GPU each."""
    with (folder / "openb_node_list_gpu_node.csv").open("w", newline="") as handle:
        rows = csv.writer(handle)
        rows.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        rows.writerow(["openb-node-0000", 64000, 262144, 1, "P100"])
    with (folder / "openb_pod_list_default.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, POD_COLUMNS)
        writer.writeheader()
        for name, qos, created, deleted in pods:
            writer.writerow(
                {
                    "name": name,
                    "cpu_milli": 4000,
                    "memory_mib": 1024,
                    "num_gpu": 1,
                    "gpu_milli": 1000,
                    "gpu_spec": "",
                    "qos": qos,
                    "pod_phase": "Succeeded",
                    "creation_time": created,
                    "deletion_time": deleted,
                    "scheduled_time": created,
                }
            )
    return folder


def test_the_floor_replays_the_high_pods_alone_and_they_queue_behind_one_another(
    tmp_path: Path,
) -> None:
    # Two high pods arrive together on one GPU: one waits the other's 1,000 s. The BE pod,
    # arriving with them, is not in the floor: with it, one high pod would wait longer or
    # not at all, by policy; alone, no policy can do better than 1,000 s for the second.
    data = _trace(
        tmp_path,
        [
            ("openb-pod-0000", "LS", 0, 1000),
            ("openb-pod-0001", "Guaranteed", 0, 1000),
            ("openb-pod-0002", "BE", 0, 1000),
            ("openb-pod-0003", "LS", 5000, 5100),  # arrives long after both ended
        ],
    )
    floor = high_floor(data, Size(1, 1.0), 0.9, 42, Setup())
    assert (floor.nodes, floor.gpus, floor.pods, floor.high) == (1, 1, 4, 3)
    assert floor.row.jobs == 3
    avg, p99 = floor.row.delay["high"]
    assert p99 == pytest.approx(1000)
    assert avg == pytest.approx(1000 / 3)
    assert floor.row.delay["low"][1] != floor.row.delay["low"][1]  # NaN: no low pod ran
    table = floor_table([floor])
    assert "| all pods, every 1st node | 1 | 1 | 4 | 3 |" in table
    assert "| 333 | 1,000 |" in table


def test_sizes_say_what_they_keep() -> None:
    assert QUICK.label() == "25% of the pods, every 128th node"
    assert WIDE.label() == "25% of the pods, every 32nd node"
    assert FULL.label() == "all pods, every 32nd node"
    assert Size(11, 1.0).label() == "all pods, every 11th node"
    assert Size(2, 0.5).label() == "50% of the pods, every 2nd node"
