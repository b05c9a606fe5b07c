"""The batch part of a scheduler profile: which actions run, in what order, and how jobs and
queues are ordered. A profile YAML carries it as ``spec.batch`` (framework/profile.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ActionName = Literal["enqueue", "allocate", "preempt", "reclaim", "backfill"]
DEFAULT_ACTIONS: tuple[ActionName, ...] = ("enqueue", "allocate", "preempt", "reclaim", "backfill")


class BatchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    actions: tuple[ActionName, ...] = Field(default=DEFAULT_ACTIONS, min_length=1)
    #: how queues are ordered and shares computed: "drf" (dominant resource share against the
    #: fair share, over the tree), "proportion" (Volcano's proportion plugin: GPU share
    #: against weight only), "fifo" (no fair share: jobs in submission order)
    fairShare: Literal["drf", "proportion", "fifo"] = "drf"
    #: "priority": higher priority first, then submission order; "fifo": submission order
    jobOrder: Literal["priority", "fifo"] = "priority"
    #: FIFO only: a job that cannot start blocks every later one (strict FIFO)
    strictOrder: bool = False
    #: a job that cannot start (and has no backfill reservation) holds back the jobs of lower
    #: priority of its own leaf queue that ask for what it asks for (batch/head_hold.py)
    holdForHead: bool = True
    #: fair share over time: honour queues' ``usage_half_life`` (decayed usage)
    usageOverTime: bool = True
