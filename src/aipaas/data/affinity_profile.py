"""A scheduler profile with data affinity: any profile plus the DataAffinity score."""

from __future__ import annotations

from typing import Any

from aipaas.scheduler.framework.profile import PluginRef, SchedulerProfile, load_profile
from aipaas.scheduler.plugins.data_affinity import NAME

#: DataAffinity's weight next to ``default``'s FGD at 101: a fully warm node is worth
#: 30 FGD steps of 100, so data decides between nodes FGD finds close, and fragmentation
#: still wins where it differs much. In benchmarks/data_sim.py (seed 42) weight 101 waited as
#: long for data as 30 with prefetch, and packed worse (0.5 point less allocation while jobs
#: waited).
DEFAULT_WEIGHT = 30


def with_data_affinity(
    base: str | SchedulerProfile = "default",
    weight: int = DEFAULT_WEIGHT,
    args: dict[str, Any] | None = None,
) -> SchedulerProfile:
    """``base`` (a profile or its name) with DataAffinity added at ``weight`` (named
    ``<base>-data``); a DataAffinity already in ``base`` is replaced."""
    profile = load_profile(base) if isinstance(base, str) else base
    scores = [ref for ref in profile.spec.scores if ref.name != NAME]
    scores.append(PluginRef(name=NAME, weight=weight, args=dict(args or {})))
    spec = profile.spec.model_copy(update={"scores": scores})
    name = profile.metadata.name.removesuffix("-data") + "-data"
    meta = profile.metadata.model_copy(update={"name": name})
    return profile.model_copy(update={"spec": spec, "metadata": meta})
