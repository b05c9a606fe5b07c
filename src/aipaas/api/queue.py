"""Queue: a tenant's line of jobs, with a share weight and its own quota."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from aipaas.api.meta import LenientModel, Model, Object
from aipaas.api.resources import Quota


class QueueSpec(Model):
    weight: float = Field(default=1, gt=0, le=1000)
    quota: Quota = Field(default_factory=Quota)


class Queue(Object):
    plural: ClassVar[str] = "queues"

    kind: Literal["Queue"] = "Queue"
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: LenientModel | None = None
