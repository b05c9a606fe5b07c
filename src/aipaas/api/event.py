"""Event: what happened to an object, and why. Written by the controller and the server."""

from __future__ import annotations

from typing import Literal

from aipaas.api.meta import Model


class Event(Model):
    kind: str
    tenant: str
    name: str
    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str
    timestamp: str
