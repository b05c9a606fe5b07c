"""The tasks of a gang that start together, told to a backend that reserves them at once.

The Backend interface starts tasks one by one; a backend whose engine reserves a gang as one
unit (Ray's placement groups) needs, at the first task's start, every task of the gang: where
aipaas placed it and what it asked for. A backend that wants this says so with a true
``places_gangs`` attribute; the controller then puts the members into the request's
annotations under ``GANG_ANNOTATION`` (controller/launch.py). Who belongs: the job's tasks
starting in the same round as the task (phase Starting, the same attempt number): a gang's
first start, or a gang placed again whole after an eviction; a task restarted alone is a gang
of one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aipaas.backends.base import LaunchRequest

GANG_ANNOTATION = "aipaas.dev/gang"


@dataclass(frozen=True)
class GangMember:
    rank: int
    task: str
    node: str
    gpus: int  # whole GPUs
    gpu_milli: int  # the share of one GPU (1000: whole)
    cpu_milli: int


@dataclass(frozen=True)
class Gang:
    #: unique per job and start round: ``<job uid>.<attempt>``
    key: str
    members: tuple[GangMember, ...]
    job: str = ""  # the job's uid

    def encode(self) -> str:
        return json.dumps(
            {
                "key": self.key,
                "job": self.job,
                "members": [
                    [m.rank, m.task, m.node, m.gpus, m.gpu_milli, m.cpu_milli] for m in self.members
                ],
            },
            separators=(",", ":"),
        )

    def member(self, task: str) -> GangMember | None:
        return next((m for m in self.members if m.task == task), None)


def gang_of(request: LaunchRequest) -> Gang | None:
    """The gang the controller told the backend about (None: none told, or unreadable)."""
    text = request.annotations.get(GANG_ANNOTATION)
    if not text:
        return None
    try:
        data: Any = json.loads(text)
        members = tuple(
            GangMember(int(r), str(t), str(n), int(g), int(m), int(c))
            for r, t, n, g, m, c in data["members"]
        )
        return Gang(str(data["key"]), members, str(data.get("job", "")))
    except (ValueError, KeyError, TypeError):
        return None


def places_gangs(backend: object) -> bool:
    """The backend wants a task's gang in its start request."""
    return bool(getattr(backend, "places_gangs", False))
