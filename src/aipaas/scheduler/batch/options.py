"""The batch part of a scheduler profile: which actions run, in what order, and how jobs and
queues are ordered. A profile YAML carries it as ``spec.batch`` (framework/profile.py).

``fairShare`` and ``jobOrder`` name a queue order and a job order of the policy registry
(batch/policy_registry.py); a name it does not know is refused as a choice outside a literal
is, naming the field and the names known. ``Session`` resolves them to the policy objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from aipaas.scheduler.batch.policy_registry import POLICIES

ActionName = Literal["enqueue", "allocate", "preempt", "reclaim", "backfill"]
DEFAULT_ACTIONS: tuple[ActionName, ...] = ("enqueue", "allocate", "preempt", "reclaim", "backfill")


class BatchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    actions: tuple[ActionName, ...] = Field(default=DEFAULT_ACTIONS, min_length=1)
    #: how queues are ordered and shares computed: "drf" (dominant resource share against the
    #: fair share, over the tree), "proportion" (Volcano's proportion plugin: GPU share
    #: against weight only), "fifo" (no fair share: jobs in submission order)
    #: (the queue orders of batch/policy_orders.py, or one registered besides)
    fairShare: str = "drf"
    #: "priority": higher priority first, then submission order; "fifo": submission order
    jobOrder: str = "priority"
    #: FIFO only: a job that cannot start blocks every later one (strict FIFO)
    strictOrder: bool = False
    #: a job that cannot start (and has no backfill reservation) holds back the jobs of lower
    #: priority of its own leaf queue that ask for what it asks for (batch/head_hold.py)
    holdForHead: bool = True
    #: fair share over time: honour queues' ``usage_half_life`` (decayed usage)
    usageOverTime: bool = True

    @field_validator("fairShare", mode="before")
    @classmethod
    def _known_queue_order(cls, value: Any) -> Any:
        return _known(value, POLICIES.queue_orders.by_name, POLICIES.queue_orders.known())

    @field_validator("jobOrder", mode="before")
    @classmethod
    def _known_job_order(cls, value: Any) -> Any:
        return _known(value, POLICIES.job_orders.by_name, POLICIES.job_orders.known())


def _known(value: Any, names: Mapping[str, object], known: str) -> Any:
    """``value`` when it names a registered policy; else the error a literal gives (the
    profile's message names the field: ``spec.batch.fairShare: Input should be ...``)."""
    if isinstance(value, str) and value in names:
        return value
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": known})
