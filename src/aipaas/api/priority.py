"""PriorityClass: a named job priority that a platform admin defines (as Kubernetes has them).

A job names a class (``spec.priorityClassName``, or the older ``spec.priority: high``); the
server stores the class's value in ``spec.priority``, where the controller reads it. A tenant
may use only the classes its Tenant allows (``spec.allowedPriorityClasses``), and a job that
names none gets the tenant's ``spec.defaultPriorityClass``. Raw integers are for platform admins.

The four built-in classes exist without an object; a PriorityClass of the same name overrides
one (its value, its preemptibility).
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal

from pydantic import Field

from aipaas.api.meta import LenientModel, Model, Object, ObjectMeta

MIN_PRIORITY: Final = -1_000_000
MAX_PRIORITY: Final = 1_000_000
DEFAULT_CLASS: Final = "normal"
# What a tenant that lists no classes may use: nothing above the default of every tenant.
DEFAULT_ALLOWED: Final = ("low", "normal")


class PriorityClassSpec(Model):
    value: int = Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, strict=True)
    # Whether the jobs of this class may be preempted by jobs of higher classes.
    preemptible: bool = Field(default=True, strict=True)
    description: str = Field(default="", max_length=1024)


class PriorityClass(Object):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "priorityclasses"

    kind: Literal["PriorityClass"] = "PriorityClass"
    spec: PriorityClassSpec
    status: LenientModel | None = None


def _built_in(name: str, value: int, description: str) -> PriorityClass:
    return PriorityClass(
        metadata=ObjectMeta(name=name),
        spec=PriorityClassSpec(value=value, description=description),
    )


BUILT_IN: Final[dict[str, PriorityClass]] = {
    c.name: c
    for c in (
        _built_in("low", 0, "work that may wait"),
        _built_in("normal", 100, "the default"),
        _built_in("high", 1000, "ahead of normal work"),
        _built_in("critical", 10000, "ahead of everything else"),
    )
}
BUILT_IN_VALUES: Final[dict[str, int]] = {n: c.spec.value for n, c in BUILT_IN.items()}
