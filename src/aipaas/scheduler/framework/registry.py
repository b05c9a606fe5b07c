"""Plugins by name: a profile names plugins, the registry builds them.

Each plugin declares its arguments as a pydantic model (a :class:`PluginArgs`: unknown
arguments refused, types strict, ranges checked), so a misspelt or out-of-range argument in a
profile is an error naming the plugin and the field instead of being silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from aipaas.scheduler.framework.interfaces import Plugin
from aipaas.scheduler.framework.types import PodRequest

A = TypeVar("A", bound="PluginArgs")


class PluginArgs(BaseModel):
    """Base of every plugin's arguments. Strict: a profile's YAML already has typed values, so
    ``"2"`` for a number or ``1`` for a bool is a mistake to report, not a value to coerce."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NoArgs(PluginArgs):
    """The arguments of a plugin that takes none."""


@dataclass
class PluginContext:
    """What a plugin may be built from: its args, a seeded generator, the expected workload.

    ``args`` is the plugin's typed arguments when the registry builds it; a plain mapping (in
    tests that call a factory directly) is validated by :meth:`typed`.
    """

    args: Mapping[str, Any] | PluginArgs
    rng: np.random.Generator
    #: Pods representative of the workload (FGD's "typical pods"); empty when unknown.
    workload: Sequence[PodRequest] = field(default_factory=tuple)

    def typed(self, model: type[A]) -> A:
        """The arguments as ``model``; raises pydantic's ValidationError (a ValueError)."""
        if isinstance(self.args, model):
            return self.args
        raw = self.args.model_dump() if isinstance(self.args, PluginArgs) else dict(self.args)
        return model.model_validate(raw)


PluginFactory = Callable[[PluginContext], Plugin]


@dataclass(frozen=True, slots=True)
class ArgumentError:
    """One bad argument: its path under ``args`` (``weigth``) and why."""

    path: str
    reason: str


class Registry:
    """Name -> factory and argument model. Registering a name twice is an error, never a
    silent override."""

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}
        self._args: dict[str, type[PluginArgs]] = {}

    def register(self, name: str, factory: PluginFactory, args: type[PluginArgs] = NoArgs) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory
        self._args[name] = args

    def merge(self, other: Registry) -> None:
        for name, factory in other._factories.items():
            self.register(name, factory, other._args[name])

    def _known(self, name: str) -> None:
        if name not in self._factories:
            known = ", ".join(sorted(self._factories))
            raise ValueError(f"unknown plugin {name!r}; known plugins: {known}")

    def args_model(self, name: str) -> type[PluginArgs]:
        """The argument model of a plugin; ValueError for an unknown plugin."""
        self._known(name)
        return self._args[name]

    def check_args(self, name: str, args: Mapping[str, Any]) -> PluginArgs | list[ArgumentError]:
        """The typed arguments, or every problem with them (the plugin must be known)."""
        model = self.args_model(name)
        try:
            return model.model_validate(dict(args))
        except ValidationError as error:
            return [_argument_error(name, model, e) for e in error.errors()]

    def build(self, name: str, context: PluginContext) -> Plugin:
        self._known(name)
        if not isinstance(context.args, self._args[name]):
            raw = context.args
            checked = self.check_args(
                name, raw.model_dump() if isinstance(raw, PluginArgs) else raw
            )
            if isinstance(checked, list):
                raise ValueError("; ".join(f"args.{e.path}: {e.reason}" for e in checked))
            context = PluginContext(checked, context.rng, context.workload)
        return self._factories[name](context)

    def names(self) -> list[str]:
        return sorted(self._factories)


def _argument_error(plugin: str, model: type[PluginArgs], error: Any) -> ArgumentError:
    path = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        takes = ", ".join(model.model_fields) or "no arguments"
        return ArgumentError(path, f"unknown argument of plugin {plugin} (it takes: {takes})")
    return ArgumentError(
        path, f"{error['msg'].lower()}, got {error['input']!r} (argument of plugin {plugin})"
    )
