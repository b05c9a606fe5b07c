"""Scheduler profiles: which plugins answer which question, with what weight and args.

A profile is a Kubernetes-shaped object, loaded from YAML; the built-in ones live in
``aipaas/scheduler/profiles/<name>.yaml``. Loading checks the shape, then every plugin's name
and arguments against the registry (each plugin's typed argument model), so a misspelt or
out-of-range argument is an error naming the plugin and the field
(``spec.scores[0].args.weigth: unknown argument of plugin FGDStranding``).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aipaas.scheduler.batch.options import BatchOptions

if TYPE_CHECKING:
    from aipaas.scheduler.framework.registry import Registry


class PluginRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=1_000_000)
    args: dict[str, Any] = Field(default_factory=dict)


class GpuSharePolicy(BaseModel):
    """Where GPU shares go (HAMi's node and GPU scheduler policies): ``binpack`` the most used
    first, ``spread`` the least used."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodePolicy: Literal["binpack", "spread"] = "binpack"
    gpuPolicy: Literal["binpack", "spread"] = "spread"


class ProfileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    filters: list[PluginRef] = Field(min_length=1)
    scores: list[PluginRef] = Field(min_length=1)
    gpuPicker: PluginRef
    #: GPU shares by memory and cores (scheduler/framework/gpu_share.py)
    gpuShare: GpuSharePolicy = Field(default_factory=GpuSharePolicy)
    #: the batch actions and orderings of a cycle (queues, preemption, backfill)
    batch: BatchOptions = Field(default_factory=BatchOptions)


class ProfileMeta(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SchedulerProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["aipaas/v1"]
    kind: Literal["SchedulerProfile"]
    metadata: ProfileMeta
    spec: ProfileSpec


#: Policy names accepted by the CLI, and `best`, which always names our best policy.
BEST_POLICY = "fgdx"
POLICY_ALIASES = {"best": BEST_POLICY}


def builtin_profile_names() -> list[str]:
    folder = resources.files("aipaas.scheduler") / "profiles"
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def load_profile(name_or_path: str, registry: Registry | None = None) -> SchedulerProfile:
    """A built-in profile by policy name (or alias), or a profile YAML file by path.

    Plugin names and arguments are checked against ``registry`` (the built-in plugins by
    default). Raises ValueError naming the source, the field path and the reason.
    """
    name = POLICY_ALIASES.get(name_or_path, name_or_path)
    if name in _builtin_names():
        profile = _builtin_profile(name)
        if registry is not None:
            check_profile(profile, registry, f"built-in profile {name!r}")
        return profile
    if Path(name_or_path).is_file():
        text = Path(name_or_path).read_text()
        source = name_or_path
    else:
        known = ", ".join([*builtin_profile_names(), *POLICY_ALIASES])
        raise ValueError(f"unknown policy {name_or_path!r}; choose one of: {known}, or a file")
    profile = _parse(text, source)
    check_profile(profile, registry or _default_registry(), source)
    return profile


def profile_problems(profile: SchedulerProfile, registry: Registry) -> list[str]:
    """``path: reason`` for every unknown plugin and every bad plugin argument."""
    spec = profile.spec
    refs = [
        *((f"spec.filters[{i}]", ref) for i, ref in enumerate(spec.filters)),
        *((f"spec.scores[{i}]", ref) for i, ref in enumerate(spec.scores)),
        ("spec.gpuPicker", spec.gpuPicker),
    ]
    problems: list[str] = []
    for where, ref in refs:
        if ref.name not in registry.names():
            known = ", ".join(registry.names())
            problems.append(f"{where}.name: unknown plugin {ref.name!r} (known plugins: {known})")
            continue
        checked = registry.check_args(ref.name, ref.args)
        if isinstance(checked, list):
            problems.extend(f"{where}.args.{e.path}: {e.reason}" for e in checked)
    return problems


def check_profile(profile: SchedulerProfile, registry: Registry, source: str) -> None:
    """Raises ValueError listing :func:`profile_problems`, if any."""
    problems = profile_problems(profile, registry)
    if problems:
        raise ValueError(f"{source}: invalid scheduler profile: {'; '.join(problems)}")


def _default_registry() -> Registry:
    # Imported here: the plugins import the framework, not the other way round at import time.
    from aipaas.scheduler.plugins import default_registry

    return default_registry()


# The controller asks for its profile every cycle; the packaged ones never change, so they
# are read and validated once (the result is frozen, so sharing it is safe).
@functools.cache
def _builtin_names() -> frozenset[str]:
    return frozenset(builtin_profile_names())


@functools.cache
def _builtin_profile(name: str) -> SchedulerProfile:
    text = (resources.files("aipaas.scheduler") / "profiles" / f"{name}.yaml").read_text()
    source = f"built-in profile {name!r}"
    profile = _parse(text, source)
    check_profile(profile, _default_registry(), source)
    return profile


def _parse(text: str, source: str) -> SchedulerProfile:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{source}: invalid scheduler profile: {error}") from error
    try:
        return SchedulerProfile.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{_path(e['loc'])}: {e['msg']}" for e in error.errors())
        raise ValueError(f"{source}: invalid scheduler profile: {problems}") from error


def _path(location: tuple[int | str, ...]) -> str:
    """('spec', 'scores', 2, 'weight') -> 'spec.scores[2].weight'."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "(document)"
