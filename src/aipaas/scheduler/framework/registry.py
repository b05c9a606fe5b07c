"""Plugins by name: a profile names plugins, the registry builds them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aipaas.scheduler.framework.interfaces import Plugin
from aipaas.scheduler.framework.types import PodRequest


@dataclass
class PluginContext:
    """What a plugin may be built from: its args, a seeded generator, the expected workload."""

    args: Mapping[str, Any]
    rng: np.random.Generator
    #: Pods representative of the workload (FGD's "typical pods"); empty when unknown.
    workload: Sequence[PodRequest] = field(default_factory=tuple)


PluginFactory = Callable[[PluginContext], Plugin]


class Registry:
    """Name -> factory. Registering a name twice is an error, never a silent override."""

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory

    def merge(self, other: Registry) -> None:
        for name, factory in other._factories.items():
            self.register(name, factory)

    def build(self, name: str, context: PluginContext) -> Plugin:
        if name not in self._factories:
            known = ", ".join(sorted(self._factories))
            raise ValueError(f"unknown plugin {name!r}; known plugins: {known}")
        return self._factories[name](context)

    def names(self) -> list[str]:
        return sorted(self._factories)
