"""Which nodes the jobs at the head of the queue will likely run on: what prefetch warms.

From the nodes' free GPUs now and when running jobs are expected to end (their estimated
remaining time: the live controller has time limits and history, the simulator an estimate
off by a seeded factor), each head job in turn takes the nodes whose GPUs free up earliest,
warmer nodes (more of its data) first among equal times; the GPUs it will take are then
counted as gone from the time it starts, so the next job is predicted elsewhere or later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class NodeTimeline:
    """Free GPUs of one node over the predicted future."""

    free_now: int
    #: (time, GPUs released then) from running jobs' expected ends.
    releases: list[tuple[float, int]] = field(default_factory=list)
    #: (time, GPUs taken from then on) by jobs predicted before.
    takes: list[tuple[float, int]] = field(default_factory=list)

    def free_at(self, time: float) -> int:
        released = sum(g for t, g in self.releases if t <= time)
        taken = sum(g for t, g in self.takes if t <= time)
        return self.free_now + released - taken

    def earliest(self, gpus: int, now: float) -> float | None:
        """The earliest time from which ``gpus`` stay free, None if never (as predicted)."""
        points = sorted({now, *(t for t, _ in self.releases if t > now), *self._take_times(now)})
        for k, time in enumerate(points):
            if all(self.free_at(later) >= gpus for later in points[k:]):
                return time
        return None

    def _take_times(self, now: float) -> list[float]:
        return [t for t, _ in self.takes if t > now]


@dataclass(frozen=True, slots=True)
class HeadJob:
    name: str
    #: GPUs of each of its pods (one pod per node).
    pods: tuple[int, ...]


def predict_nodes(
    heads: Sequence[HeadJob],
    timelines: Mapping[str, NodeTimeline],
    now: float,
    warmth: Mapping[str, Mapping[str, float]] | None = None,
    starts: dict[str, float] | None = None,
) -> dict[str, tuple[str, ...]]:
    """Job name -> the nodes predicted to run its pods (empty when none is predicted).

    ``warmth[job][node]`` (0..1, optional) is the share of the job's data on the node: among
    nodes free at the same time, warmer ones are predicted first (the scheduler's data affinity
    will pick them). ``starts``, when given, receives each predicted job's expected start.
    The timelines are changed: each predicted job's GPUs are added to their ``takes``.
    """
    warmth = warmth or {}
    predicted: dict[str, tuple[str, ...]] = {}
    for job in heads:
        gpus = max(job.pods, default=0)
        warm = warmth.get(job.name, {})
        options: list[tuple[float, float, str]] = []
        for node, timeline in timelines.items():
            time = timeline.earliest(gpus, now)
            if time is not None:
                options.append((time, -warm.get(node, 0.0), node))
        options.sort()
        chosen = options[: len(job.pods)]
        if len(chosen) < len(job.pods):
            predicted[job.name] = ()
            continue
        start = max(time for time, _, _ in chosen)
        for _, _, node in chosen:
            timelines[node].takes.append((start, gpus))
        predicted[job.name] = tuple(node for _, _, node in chosen)
        if starts is not None:
            starts[job.name] = start
    return predicted
