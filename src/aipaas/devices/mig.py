"""MIG profiles of NVIDIA data-center GPUs, as partitions that consume a GPU's shared counters.

Who calls it: the topology loader (sim nodes) and the local backend. Pure data.

A GPU with MIG enabled is published as its whole device plus one device per possible placement
of every profile. The GPU has one counter set: ``memory-slice-0`` .. ``memory-slice-7`` (value 1
each: which eighth of the memory a partition occupies) and ``compute-slices`` (7). The whole
device consumes all of them; a partition consumes its slices and its compute. So a GPU is used
whole or as partitions, never both, and two partitions never overlap - enforced by counters
alone, as in Kubernetes partitionable devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MEMORY_SLICES", "MIG_PROFILE_SETS", "MigProfile", "placements"]

MEMORY_SLICES: Final = 8
COMPUTE_SLICES: Final = 7


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # "1g.10gb"
    compute: int  # compute slices (of 7)
    memory_slices: int  # memory eighths
    memory_gib: int
    starts: tuple[int, ...]  # first memory slice of each allowed placement


_PROFILES_80GB: Final = (
    MigProfile("1g.10gb", 1, 1, 10, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.20gb", 1, 2, 20, (0, 2, 4, 6)),
    MigProfile("2g.20gb", 2, 2, 20, (0, 2, 4)),
    MigProfile("3g.40gb", 3, 4, 40, (0, 4)),
    MigProfile("4g.40gb", 4, 4, 40, (0,)),
    MigProfile("7g.80gb", 7, 8, 80, (0,)),
)
_PROFILES_40GB: Final = (
    MigProfile("1g.5gb", 1, 1, 5, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.10gb", 1, 2, 10, (0, 2, 4, 6)),
    MigProfile("2g.10gb", 2, 2, 10, (0, 2, 4)),
    MigProfile("3g.20gb", 3, 4, 20, (0, 4)),
    MigProfile("4g.20gb", 4, 4, 20, (0,)),
    MigProfile("7g.40gb", 7, 8, 40, (0,)),
)
MIG_PROFILE_SETS: Final[dict[str, tuple[MigProfile, ...]]] = {
    "h100-80gb": _PROFILES_80GB,
    "a100-80gb": _PROFILES_80GB,
    "a100-40gb": _PROFILES_40GB,
}


def placements(profile_set: str) -> list[tuple[MigProfile, int]]:
    """Every (profile, start slice) a GPU of this kind can host.

    Raises:
        KeyError: unknown profile set (the message lists the known ones).
    """
    if profile_set not in MIG_PROFILE_SETS:
        known = ", ".join(MIG_PROFILE_SETS)
        raise KeyError(f"unknown MIG profile set {profile_set!r} (known: {known})")
    return [(p, start) for p in MIG_PROFILE_SETS[profile_set] for start in p.starts]
