"""CPU and memory limits of a local task, through cgroup v1 (these machines have the hybrid
layout: v1 controllers, v2 mounted at /sys/fs/cgroup/unified without them).

Who calls it: the local backend's ``start`` (``make_groups``) for a task with ``limits``; the
runner (runner.py) joins the groups before it starts the task, reads whether the kernel's OOM
killer acted in the memory group when the task ends, and removes the groups.

Each task gets ``<the server's own group>/aipaas/<request id>`` in the memory controller
(``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` where swap is accounted, so
the task cannot swap past it) and in the cpu controller (``cpu.cfs_quota_us`` over a 100 ms
period: 500m is 50 ms each period). Groups are made under the server's own (read from
/proc/self/cgroup) so that a server inside a container makes them where it may.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

ROOT: Final = Path("/sys/fs/cgroup")
CPU_PERIOD_US: Final = 100_000
GROUP_DIR: Final = "aipaas"


class LimitError(Exception):
    """The limits cannot be enforced here: the task is not started (never run unlimited)."""


def make_groups(request_id: str, cpu_milli: int, memory_mib: int) -> list[str]:
    """The task's groups (directories), made with their limits; LimitError naming the field."""
    groups: list[str] = []
    try:
        if memory_mib:
            group = _group("memory", request_id, "limits.memory")
            limit = str(memory_mib << 20)
            (group / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # absent where swap is not accounted
                (group / "memory.memsw.limit_in_bytes").write_text(limit)
            groups.append(str(group))
        if cpu_milli:
            group = _group("cpu", request_id, "limits.cpu")
            (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(cpu_milli * CPU_PERIOD_US // 1000))
            groups.append(str(group))
    except OSError as err:
        remove_groups(groups)
        raise LimitError(f"limits: cgroup v1 refused the task's group: {err}") from err
    return groups


def _group(controller: str, request_id: str, field: str) -> Path:
    mount = ROOT / controller
    if not (mount / "cgroup.procs").exists():
        raise LimitError(
            f"{field}: this machine has no cgroup v1 {controller} controller at {mount}, so the "
            "limit cannot be enforced"
        )
    group = mount / own_group(controller).lstrip("/") / GROUP_DIR / request_id
    group.mkdir(parents=True, exist_ok=True)
    return group


def own_group(controller: str) -> str:
    """This process's group in a v1 controller (``/`` when it is in none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(","):
                return path
    return "/"


def remove_groups(groups: list[str]) -> None:
    for group in groups:
        with contextlib.suppress(OSError):
            os.rmdir(group)
