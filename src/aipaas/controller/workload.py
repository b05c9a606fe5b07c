"""What the live controller's placement learns and chooses: the workload FGD expects, and the
profile of each node pool.

FGD-class scoring (the default profile) measures a node's fragmentation against "typical
pods": the most frequent pod shapes of the expected workload. The simulator takes them from the
trace; the live controller learns them here, from the task shapes of recent submissions: a
bounded record of the last ``size`` replicas submitted, the oldest falling out as new ones come
(so the workload follows what users submit now, and memory stays bounded). Until anything is
recorded the workload is empty: FGD then scores every node alike and the profile's other scores
decide.

Node pools: a node labelled ``aipaas.dev/pool: NAME`` belongs to pool NAME; the setting
``pool_profiles`` (``AIPAAS_POOL_PROFILES="gpu-a=fgd,cpu=bestfit"``) names the profile each pool
places with; nodes of other pools, and unlabelled nodes, use the controller's policy.

Who calls it: the controller's cycle (``Workload.observe`` with the cycle's jobs, ``pods()``
passed to the Placer as ``workload``); ``pool_policies`` by the Placer's caller. Pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Final

from aipaas.api.job import Job
from aipaas.scheduler.batch.from_api import pod_request
from aipaas.scheduler.framework.types import PodRequest

#: the node label that names a node's pool
POOL_LABEL: Final = "aipaas.dev/pool"
#: replicas remembered by default: enough for FGD's 95% coverage of a varied workload, few
#: enough that the typical pods follow a change of workload within hours, not days
DEFAULT_SIZE: Final = 2000
MAX_SIZE: Final = 1_000_000


class Workload:
    """The pod shapes of the last ``size`` task replicas submitted (oldest dropped first)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if not 1 <= size <= MAX_SIZE:
            raise ValueError(f"workload size must be 1..{MAX_SIZE}, got {size}")
        self.size = size
        self._pods: deque[PodRequest] = deque(maxlen=size)
        # uids of the jobs already recorded that are still listed: each job counts once, and the
        # set holds no more than the jobs the controller sees
        self._seen: set[str] = set()

    def observe(self, jobs: Iterable[Job]) -> int:
        """Record the replicas of every job not seen before, in the order given (the store lists
        oldest first); returns how many replicas were recorded."""
        listed: set[str] = set()
        added = 0
        for job in jobs:
            uid = job.metadata.uid or f"{job.tenant}/{job.name}"
            listed.add(uid)
            if uid in self._seen:
                continue
            for task in job.spec.tasks:
                for index in range(task.replicas):
                    self._pods.append(pod_request(task, f"{task.name}-{index}"))
                    added += 1
        # Jobs no longer listed (finished, deleted) cannot come back: forget their uids.
        self._seen = listed
        return added

    def record(self, pods: Iterable[PodRequest]) -> None:
        """Record shapes directly (tests, and callers that have pod requests already)."""
        self._pods.extend(pods)

    def pods(self) -> tuple[PodRequest, ...]:
        """The recorded shapes, oldest first: what ``Scheduler(workload=...)`` takes."""
        return tuple(self._pods)

    def __len__(self) -> int:
        return len(self._pods)


def parse_pool_profiles(text: str) -> dict[str, str]:
    """``"gpu-a=fgd,cpu=bestfit"`` -> ``{"gpu-a": "fgd", "cpu": "bestfit"}``; ValueError naming
    the entry that is not ``POOL=PROFILE`` or repeats a pool."""
    result: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        pool, sep, profile = (part.strip() for part in entry.partition("="))
        if not sep or not pool or not profile:
            raise ValueError(f"pool profile {entry!r}: write POOL=PROFILE, e.g. gpu-a=fgd")
        if pool in result:
            raise ValueError(f"pool profile {entry!r}: pool {pool!r} is named twice")
        result[pool] = profile
    return result


def check_pool_profiles(pool_profiles: Mapping[str, str]) -> dict[str, str]:
    """``pool_profiles`` when every profile it names loads (a built-in name, an alias or a
    profile file); ValueError naming the pool otherwise: a bad entry is refused when the server
    starts, not found by every controller cycle."""
    from aipaas.scheduler.framework.profile import load_profile

    for pool, profile in pool_profiles.items():
        try:
            load_profile(profile)
        except ValueError as err:
            raise ValueError(f"pool {pool!r}: {err}") from err
    return dict(pool_profiles)


def pool_of(labels: Mapping[str, str]) -> str:
    """The pool a node belongs to ("" when it carries no pool label)."""
    return labels.get(POOL_LABEL, "")


def pool_policies(
    pools: Iterable[str], pool_profiles: Mapping[str, str], default: str
) -> dict[str, str]:
    """The profile each pool places with: its entry in ``pool_profiles``, else ``default``."""
    return {pool: pool_profiles.get(pool, default) for pool in pools}
