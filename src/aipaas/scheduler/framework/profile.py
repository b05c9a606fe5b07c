"""Scheduler profiles: which plugins answer which question, with what weight and args.

A profile is a Kubernetes-shaped object, loaded from YAML; the built-in ones live in
``aipaas/scheduler/profiles/<name>.yaml``.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class PluginRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=1_000_000)
    args: dict[str, Any] = Field(default_factory=dict)


class ProfileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    filters: list[PluginRef] = Field(min_length=1)
    scores: list[PluginRef] = Field(min_length=1)
    gpuPicker: PluginRef


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


def load_profile(name_or_path: str) -> SchedulerProfile:
    """A built-in profile by policy name (or alias), or a profile YAML file by path."""
    name = POLICY_ALIASES.get(name_or_path, name_or_path)
    if name in _builtin_names():
        return _builtin_profile(name)
    if Path(name_or_path).is_file():
        text = Path(name_or_path).read_text()
        source = name_or_path
    else:
        known = ", ".join([*builtin_profile_names(), *POLICY_ALIASES])
        raise ValueError(f"unknown policy {name_or_path!r}; choose one of: {known}, or a file")
    return _parse(text, source)


# The controller asks for its profile every cycle; the packaged ones never change, so they
# are read and validated once (the result is frozen, so sharing it is safe).
@functools.cache
def _builtin_names() -> frozenset[str]:
    return frozenset(builtin_profile_names())


@functools.cache
def _builtin_profile(name: str) -> SchedulerProfile:
    text = (resources.files("aipaas.scheduler") / "profiles" / f"{name}.yaml").read_text()
    return _parse(text, f"built-in profile {name!r}")


def _parse(text: str, source: str) -> SchedulerProfile:
    try:
        data = yaml.safe_load(text)
        return SchedulerProfile.model_validate(data)
    except (yaml.YAMLError, ValidationError) as error:
        raise ValueError(f"{source}: invalid scheduler profile: {error}") from error
