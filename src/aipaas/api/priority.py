"""PriorityClass: a named job priority that a platform admin defines (as Kubernetes has them).

A job names a class (``spec.priorityClassName``, or the older ``spec.priority: high``); the
server stores the class's value in ``spec.priority``, where the controller reads it. A tenant
may use only the classes its Tenant allows (``spec.allowedPriorityClasses``), and a job that
names none gets the tenant's ``spec.defaultPriorityClass``. Raw integers are for platform admins.

The four built-in classes exist without an object; a PriorityClass of the same name overrides
one (its value, its preemptibility). ``spec.preemptible`` on a job overrides its class's; the
server stores the class's answer there when the job does not say (as it stores the value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Final, Literal

from pydantic import Field

from aipaas.api.meta import LenientModel, Model, Object, ObjectMeta
from aipaas.errors import FieldError, InvalidObject

if TYPE_CHECKING:
    from aipaas.api.job import JobSpec

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


def find_class(name: str, classes: Mapping[str, PriorityClass]) -> PriorityClass | None:
    """The class of this name: a stored one overrides a built-in."""
    return classes.get(name) or BUILT_IN.get(name)


def resolve_priority(
    spec: JobSpec, classes: Mapping[str, PriorityClass], default_class: str = DEFAULT_CLASS
) -> tuple[int, bool]:
    """A job's (priority, preemptible) as a platform admin's submission resolves them: the
    class's value unless the job gives a number of its own (``spec.priority`` given and not the
    built-in value of the class it names), and the class's preemptibility unless the job says
    (``spec.preemptible``). A job that names no class has ``default_class``. ``classes`` are the
    stored PriorityClass objects by name (a built-in applies where none is stored).

    Raises InvalidObject (spec.priorityClassName) when the class does not exist. Anyone else's
    submission has more rules (server/submission.py); scenario files act as platform admin."""
    named = spec.priority_class_name
    name = named or default_class
    given = "priority" in spec.model_fields_set
    found = find_class(name, classes)
    if found is None:
        if named is None and given:
            # A raw number with no class at all: nothing to take preemptibility from.
            return spec.priority, True if spec.preemptible is None else spec.preemptible
        where = "spec.priorityClassName" if named else "spec.priority"
        raise InvalidObject([FieldError(where, f"priority class {name} does not exist")])
    own_number = given and (named is None or spec.priority != BUILT_IN_VALUES.get(name))
    value = spec.priority if own_number else found.spec.value
    preemptible = found.spec.preemptible if spec.preemptible is None else spec.preemptible
    return value, preemptible
