"""Who may say what in a submitted object: system keys, priority classes, dependencies.

Pure rules over objects the service has read; the service (server/service.py) calls them inside
the transaction that stores the object, so what they check is what gets stored.

- Labels and annotations under ``aipaas.dev/`` (and its subdomains but ``sim.aipaas.dev/``,
  a simulated job's own settings) are the server's and the controller's: who submitted a job
  (what metering bills), cancel and delete requests, what the controller made. A user's write
  may carry one only with the value already stored (a fetched object applies again); one the
  write leaves out is kept.
- A job's priority comes from a PriorityClass its tenant allows; only a platform admin gives
  a number of its own.
- A job may depend only on jobs of its tenant that exist, and never on itself through others.
- The queue tree (issue 11): a queue's parent is a queue of its tenant that exists, never the
  queue itself through others, and never a queue with unfinished jobs (jobs are only in
  leaves); a job names a leaf queue. A guarantee above the quota is refused by api/queue.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from aipaas.api.job import Job, JobSpec
from aipaas.api.meta import Object
from aipaas.api.priority import (
    BUILT_IN,
    BUILT_IN_VALUES,
    DEFAULT_ALLOWED,
    DEFAULT_CLASS,
    PriorityClass,
)
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant
from aipaas.errors import FieldError, InvalidObject

SYSTEM_DOMAIN = "aipaas.dev"
USER_DOMAINS = frozenset({"sim.aipaas.dev", "kubernetes.aipaas.dev"})  # what a job asks of
# the simulator or of a Kubernetes cluster (its image) is the user's


def is_system_key(key: str) -> bool:
    prefix, slash, _ = key.partition("/")
    if not slash or prefix in USER_DOMAINS:
        return False
    return prefix == SYSTEM_DOMAIN or prefix.endswith("." + SYSTEM_DOMAIN)


def check_system_keys(wanted: Object, current: Object | None) -> Object:
    """Refuse a system label or annotation that differs from the stored one (or that a new
    object brings); return ``wanted`` with the stored system keys it left out kept."""
    errors: list[FieldError] = []
    stored_meta = current.metadata if current is not None else None
    merged: dict[str, dict[str, str]] = {}
    for field in ("labels", "annotations"):
        given: dict[str, str] = getattr(wanted.metadata, field)
        stored: dict[str, str] = getattr(stored_meta, field) if stored_meta is not None else {}
        for key, value in given.items():
            if is_system_key(key) and stored.get(key) != value:
                errors.append(
                    FieldError(
                        f"metadata.{field}[{key}]",
                        f"{SYSTEM_DOMAIN}/ keys are set by the platform, not by users"
                        + ("" if key not in stored else "; it cannot be changed"),
                    )
                )
        kept = {k: v for k, v in stored.items() if is_system_key(k) and k not in given}
        if kept:
            merged[field] = {**given, **kept}
    if errors:
        raise InvalidObject(errors)
    if not merged:
        return wanted
    meta = wanted.metadata.model_copy(update=merged)
    return wanted.model_copy(update={"metadata": meta})


def priority_class_keys(job: Job) -> list[tuple[str, str, str]]:
    """The PriorityClass objects a job's submission probably reads (asked with its other
    lookups): the class it names, else the usual default."""
    return [("PriorityClass", "", job.spec.priority_class_name or DEFAULT_CLASS)]


def resolve_priority(
    job: Job,
    *,
    platform_admin: bool,
    tenant: Tenant | None,
    classes: Callable[[str], PriorityClass | None],
) -> JobSpec:
    """The job's spec with its class named, the class's value in ``spec.priority`` and, unless
    the job says, the class's preemptibility in ``spec.preemptible`` (the spec itself when it
    has all three already).

    ``classes`` finds a stored PriorityClass by name (one overrides a built-in). A platform
    admin may give a number of its own (kept) and use any class; anyone else gets the class's
    value, may name only classes the tenant allows, and may repeat only the value the class
    gives (so that a fetched job applies again)."""
    spec = job.spec
    given = "priority" in spec.model_fields_set
    named = spec.priority_class_name
    default = tenant.spec.default_priority_class if tenant is not None else DEFAULT_CLASS
    if named is None and given and platform_admin:
        # A raw number, the platform admin's alone; preemptible as the default class says.
        if spec.preemptible is not None:
            return spec
        found_default = classes(default) or BUILT_IN.get(default)
        preemptible = found_default.spec.preemptible if found_default is not None else True
        return spec.model_copy(update={"preemptible": preemptible})
    name = named or default
    # ``priority: high`` (the older form) names the class: errors name what the user wrote.
    older_form = given and named is not None and spec.priority == BUILT_IN_VALUES.get(named)
    where = "spec.priority" if older_form or not named else "spec.priorityClassName"
    found = classes(name) or BUILT_IN.get(name)
    if found is None:
        reason = (
            f"priority class {name} does not exist"
            if named
            else f"the tenant's default priority class {name} does not exist"
        )
        raise InvalidObject([FieldError(where, reason)])
    value = found.spec.value
    if platform_admin:
        if given and spec.priority != BUILT_IN_VALUES.get(name):
            value = spec.priority  # a number of its own, beside the class
    else:
        if tenant is not None and not tenant.spec.allows_priority_class(name):
            allowed = sorted(
                {
                    tenant.spec.default_priority_class,
                    *(
                        DEFAULT_ALLOWED
                        if tenant.spec.allowed_priority_classes is None
                        else tenant.spec.allowed_priority_classes
                    ),
                }
            )
            raise InvalidObject(
                [
                    FieldError(
                        where,
                        f"tenant {job.tenant} may not use priority class {name} "
                        f"(allowed: {', '.join(allowed)})",
                    )
                ]
            )
        if given and spec.priority not in (value, BUILT_IN_VALUES.get(name)):
            raise InvalidObject(
                [
                    FieldError(
                        "spec.priority",
                        "only a platform admin sets a priority number; name a priority class "
                        "(spec.priorityClassName) instead",
                    )
                ]
            )
    preemptible = found.spec.preemptible if spec.preemptible is None else spec.preemptible
    if spec.priority == value and named == name and spec.preemptible == preemptible:
        return spec
    return spec.model_copy(
        update={"priority": value, "priority_class_name": name, "preemptible": preemptible}
    )


def check_dependencies(
    job: Job, jobs_named: Callable[[Sequence[str]], Mapping[str, Job]], *, limit: int = 10_000
) -> None:
    """Refuse a dependency on a job that does not exist in the tenant, or one through which the
    job would depend on itself (a job stored before may name this one, deleted since).

    ``jobs_named`` reads the stored jobs of the tenant by name (one query for a whole level of
    the walk); ``limit`` bounds the walk over ancestors."""
    wanted = job.spec.depends_on
    if not wanted:
        return
    found = jobs_named(wanted)
    errors = [
        FieldError(f"spec.dependsOn[{i}]", f"job {name} does not exist in tenant {job.tenant}")
        for i, name in enumerate(wanted)
        if name not in found
    ]
    if errors:
        raise InvalidObject(errors)
    # Walk up from each dependency: which one leads back to the job being submitted.
    origin = {name: i for i, name in reversed(list(enumerate(wanted)))}
    seen = set(wanted)
    level = {name: found[name] for name in wanted}
    while level:
        following: dict[str, int] = {}
        for name, parent in level.items():
            for further in parent.spec.depends_on:
                if further == job.name:
                    index = origin[name]
                    through = "" if name == wanted[index] else f" through job {name}"
                    raise InvalidObject(
                        [
                            FieldError(
                                f"spec.dependsOn[{index}]",
                                f"job {wanted[index]} depends on {job.name}{through}: "
                                "this dependency would close a cycle",
                            )
                        ]
                    )
                if further not in seen:
                    seen.add(further)
                    following[further] = origin[name]
        if len(seen) > limit:
            raise InvalidObject(
                [FieldError("spec.dependsOn", f"more than {limit} jobs upstream of this one")]
            )
        stored = jobs_named(list(following)) if following else {}
        origin.update(following)
        level = {name: stored[name] for name in following if name in stored}


def check_queue_parent(
    queue: Queue,
    current: Queue | None,
    queues_named: Callable[[Sequence[str]], Mapping[str, Queue]],
    unfinished_jobs: Callable[[str], Sequence[str]],
    *,
    limit: int = 64,
) -> None:
    """Refuse a parent that does not exist in the tenant, one under this queue (a cycle), and,
    when the parent changes (``current``: the stored queue), one that has unfinished jobs: it
    would stop being a leaf while jobs wait in it.

    ``queues_named`` reads the tenant's stored queues by name; ``unfinished_jobs`` the names of
    a queue's jobs that have not finished; ``limit`` bounds the walk up the tree."""
    parent = queue.spec.parent
    if parent is None:
        return
    found = queues_named([parent]).get(parent)
    if found is None:
        raise InvalidObject(
            [FieldError("spec.parent", f"queue {parent} does not exist in tenant {queue.tenant}")]
        )
    chain = [parent]
    above: Queue | None = found
    while above is not None and above.spec.parent is not None:
        further = above.spec.parent
        if further == queue.name:
            path = " -> ".join([queue.name, *chain, queue.name])
            raise InvalidObject(
                [
                    FieldError(
                        "spec.parent",
                        f"queue {parent} is under {queue.name} ({path}): this parent would "
                        "close a cycle",
                    )
                ]
            )
        if further in chain:
            break  # a cycle above that does not pass through this queue: not its doing
        if len(chain) >= limit:
            raise InvalidObject(
                [FieldError("spec.parent", f"more than {limit} queues above this one")]
            )
        chain.append(further)
        above = queues_named([further]).get(further)
    if current is not None and current.spec.parent == parent:
        return  # the parent is already its parent: nothing changes for its jobs
    waiting = unfinished_jobs(parent)
    if waiting:
        shown = ", ".join(waiting[:3]) + (", ..." if len(waiting) > 3 else "")
        raise InvalidObject(
            [
                FieldError(
                    "spec.parent",
                    f"queue {parent} has unfinished jobs ({shown}); jobs are only in leaf "
                    "queues, so it cannot become a parent until they finish",
                )
            ]
        )


def check_leaf_queue(job: Job, children: Sequence[str]) -> None:
    """Refuse a job in a queue that is the parent of others (``children``: some of them)."""
    if children:
        shown = ", ".join(children[:3]) + (", ..." if len(children) > 3 else "")
        raise InvalidObject(
            [
                FieldError(
                    "spec.queue",
                    f"queue {job.spec.queue} is the parent of queues ({shown}); jobs go only "
                    "in leaf queues: name one of those",
                )
            ]
        )
