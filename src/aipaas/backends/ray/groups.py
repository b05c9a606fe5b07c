"""A gang's placement group in Ray: one bundle per task, each pinned to the node aipaas chose.

The controller starts tasks one by one; the first start of a gang (the tasks starting in the
same round, told in the request: backends/gang.py) creates the group with every task's bundle,
and the later starts find it by name and put their Ray task (runner.py, submitted by the
supervisor actor) in their own bundle. A bundle holds
the task's CPUs and GPUs (Ray's fractional GPUs for a shared one) and is pinned to its node by
the node-id label (``bundle_label_selector``), so Ray only checks and reserves: it never places
a bundle where aipaas did not. The strategy follows aipaas's placement: STRICT_SPREAD when every
task has a node of its own, PACK when some share one.

Names: ``aipaas-pg-<job uid>.<attempt>`` for a gang's round (its first start, or a start of the
whole gang again after an eviction); a task restarted alone whose round already has a group
without its bundle gets one of its own, ``aipaas-pg-<request id>``. Groups are detached and
named (namespace ``aipaas``): a restarted server finds them by name and never makes a second.
A round's members that took their place at an earlier start (``round-<key>.json`` says which)
are left out of a group made later: they hold their resources already. An elastic job's tasks
take no group: each is pinned alone, as a shrink takes back one task and Ray frees a bundle only
with its whole group.

The record of a group (``run_dir/.groups/<name>.json``: its bundles by task, and the request
ids that used it) outlives the driver; a task's record says which group and bundle it uses
(``placement.json``). A group is removed when the last task using it has ended (its exit code
recorded or its Ray task gone): removing it earlier would kill the tasks in it.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray._private.state import available_resources_per_node
from ray.util.placement_group import (
    PlacementGroup,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

from aipaas.backends import rendezvous
from aipaas.backends.base import LaunchRequest
from aipaas.backends.gang import Gang, GangMember, gang_of
from aipaas.backends.ray.inventory import RayNode
from aipaas.backends.ray.records import TaskRecords, write

GROUP_PREFIX = "aipaas-pg-"
#: after this driver removed a group, how long a new group waits first for Ray to show the
#: removed group's resources free again (see ``Groups._settle``), and for how long at most
SETTLE_AFTER_REMOVAL_SECONDS = 1.0
SETTLE_SECONDS = 0.5
NODE_ID_LABEL = "ray.io/node-id"
#: Ray refuses a bundle of zeros: a task that asked for nothing holds this much CPU
MIN_CPU = 0.01


@dataclass(frozen=True)
class Placement:
    group: PlacementGroup | None  # None: a task alone, pinned to its node (``node_id``)
    name: str
    bundle: int
    resources: dict[str, float]  # the bundle's: what the task asks for
    node_id: str = ""  # the Ray node of a task alone


class Groups:
    def __init__(self, records: TaskRecords) -> None:
        self.records = records
        self.dir = records.run_dir / ".groups"
        self.dir.mkdir(exist_ok=True)
        #: groups this driver made or found, by name: a round's later starts ask Ray nothing
        self._live: dict[str, PlacementGroup] = {}
        self._removed_at = -SETTLE_AFTER_REMOVAL_SECONDS  # when this driver last removed one

    def place(
        self,
        request: LaunchRequest,
        nodes: dict[str, RayNode],
        own_gpus: float,
    ) -> Placement:
        """The group and bundle the task goes into, the group made when needed."""
        rid = request.request_id
        known = self._placement_of(rid)
        if known is not None:  # a start repeated after a crash: the same bundle
            return known
        gang = _gang(request)
        own = gang.member(request.task) or _alone(request).members[0]
        name = GROUP_PREFIX + gang.key
        record = self._record(name)
        # No record, no group (the record is written before Ray is asked): Ray not asked.
        group = self._group(name) if record is not None else None
        if group is not None and record is not None and request.task in record["tasks"]:
            return self._use(name, group, record, record["tasks"].index(request.task), rid)
        # Members of the round that took their place at an earlier start (still Starting, so
        # the controller counts them in: elastic extras started one cycle apart, tasks
        # restarted one by one) already hold their CPUs and GPUs; a group reserving them
        # again would not fit on their nodes, and Ray would keep it, and this task, pending.
        gang = self._unplaced(gang, request.task)
        if len(gang.members) == 1 or group is not None:
            # A task restarted alone: the bundle its job holds on its node, free since the
            # attempt before ended (Ray keeps a bundle reserved until its whole group ends).
            free = self._free_bundle(gang.job, request.node, _bundle(own, own_gpus))
            if free is not None:
                return self._use(*free, rid)
        if len(gang.members) == 1:  # alone, and no bundle of its job to take: no group
            return self._pinned(request, own, own_gpus, nodes)
        if group is not None:  # its round has a group without it: a group of its own
            gang = Gang(rid, (own,), gang.job)
            name = GROUP_PREFIX + rid
            record, group = self._record(name), self._group(name)
            if group is not None and record is not None:
                return self._use(name, group, record, 0, rid)
        record, group = self._create(name, gang, request.task, own_gpus, nodes)
        return self._use(name, group, record, record["tasks"].index(request.task), rid)

    def _unplaced(self, gang: Gang, task: str) -> Gang:
        """``gang`` without the members already placed in its round, ``task`` noted as placed
        there (before it is: a crash in between leaves it out of later groups all the same,
        and its own repeated start keeps it). A task the controller told no gang for
        (``_alone``) has no round."""
        if not gang.job:
            return gang
        path = self.dir / f"round-{gang.key}.json"
        placed = [str(t) for t in (self._read(path) or {}).get("tasks", [])]
        if task not in placed:
            write(path, json.dumps({"tasks": [*placed, task]}))
        members = tuple(m for m in gang.members if m.task == task or m.task not in placed)
        return gang if len(members) == len(gang.members) else Gang(gang.key, members, gang.job)

    def _pinned(
        self, request: LaunchRequest, own: GangMember, own_gpus: float, nodes: dict[str, RayNode]
    ) -> Placement:
        """A task that starts alone: no placement group (Ray takes ~100 ms to make one, and
        as long to free its resources after its removal: a burst of one-task jobs ran at a
        fifth of the rate of plain tasks), but a task pinned to the node aipaas chose (hard
        node affinity: Ray never runs it elsewhere, and refuses it when that node is gone)
        asking for its CPUs and GPUs (Ray's fractions included)."""
        node = nodes.get(request.node)
        if node is None:
            raise ValueError(f"the Ray cluster has no live node {request.node}")
        bundle = _bundle(own, own_gpus)
        _check_fits(Gang(request.request_id, (own,), ""), [bundle], nodes)
        placed = {"group": None, "node_id": node.node_id, "resources": bundle}
        self.records.mark(request.request_id, "placement.json", json.dumps(placed))
        return Placement(None, "", 0, bundle, node.node_id)

    def release(self, rid: str) -> None:
        """The task ended: its group is removed once no task using it is still on (each
        task's end is looked at once: its ``released`` mark)."""
        if self.records.has(rid, "released"):
            return
        placed = self._read(self.records.dir(rid) / "placement.json")
        if placed is not None and placed.get("group") is not None:
            name = str(placed["group"])
            record = self._record(name) or {}
            users = [str(u) for u in record.get("users", {}) if u != rid]
            if not any(self._holds(u) for u in users):
                group = self._group(name)
                if group is not None:
                    remove_placement_group(group)  # before the mark: a crash repeats it
                    self._live.pop(name, None)
                    self._removed_at = time.monotonic()
        self.records.mark(rid, "released")

    def state(self, rid: str) -> str | None:
        """Ray's state of the task's group (PENDING: Ray cannot place a bundle)."""
        placed = self._read(self.records.dir(rid) / "placement.json")
        if placed is None or placed.get("group") is None:
            return None
        group = self._group(str(placed["group"]))
        if group is None:
            return None
        with contextlib.suppress(Exception):
            return str(placement_group_table(group).get("state"))
        return None

    # helpers ------------------------------------------------------------------------------

    def _group(self, name: str) -> PlacementGroup | None:
        group = self._live.get(name) or _existing(name)
        if group is not None:
            self._live[name] = group
        return group

    def _create(
        self,
        name: str,
        gang: Gang,
        task: str,
        own_gpus: float,
        nodes: dict[str, RayNode],
    ) -> tuple[dict[str, Any], PlacementGroup]:
        bundles: list[dict[str, float]] = []
        selectors: list[dict[str, str]] = []
        for member in gang.members:
            node = nodes.get(member.node)
            if node is None:
                raise ValueError(f"the Ray cluster has no live node {member.node}")
            gpus = own_gpus if member.task == task else _gpus(member)
            bundles.append(_bundle(member, gpus))
            selectors.append({NODE_ID_LABEL: node.node_id})
        _check_fits(gang, bundles, nodes)
        spread = len({m.node for m in gang.members}) == len(gang.members) > 1
        record: dict[str, Any] = {
            "tasks": [m.task for m in gang.members],
            "nodes": [m.node for m in gang.members],
            "bundles": bundles,
            "strategy": "STRICT_SPREAD" if spread else "PACK",
            "users": {},  # request id -> the bundle it took
        }
        # Written first: a crash after Ray made the group finds the record beside it.
        write(self.dir / f"{name}.json", json.dumps(record))
        if gang.job:
            groups = [g for g in self._job_groups(gang.job) if self._group(g) is not None]
            payload = {"groups": [*groups, name]}
            write(self.dir / f"job-{gang.job}.json", json.dumps(payload))
        self._settle(bundles, [s[NODE_ID_LABEL] for s in selectors])
        group = placement_group(
            bundles,
            strategy=record["strategy"],
            name=name,
            lifetime="detached",  # outlives this driver: adopted by name after a restart
            bundle_label_selector=selectors,
        )
        self._live[name] = group
        return record, group

    def _settle(self, bundles: list[dict[str, float]], node_ids: list[str]) -> None:
        """Shortly after this driver removed a group, wait (at most ``SETTLE_SECONDS``) until
        Ray shows the new group's resources free on its nodes. Ray frees a removed group's
        resources some tens of ms later, and a group that does not fit when it is made waits
        for Ray's retry, about half a second later (measured: 440 to 570 ms, against 3 ms for
        a group made once the resources are back), which a gang started right after another
        one ended would add to its start."""
        if time.monotonic() - self._removed_at > SETTLE_AFTER_REMOVAL_SECONDS:
            return
        wanted: dict[str, dict[str, float]] = {}
        for bundle, node_id in zip(bundles, node_ids, strict=True):
            on_node = wanted.setdefault(node_id, {})
            for key, value in bundle.items():
                on_node[key] = on_node.get(key, 0.0) + value
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            try:  # Ray's own view, per node (a private helper: any failure, no wait)
                free = available_resources_per_node()
            except Exception:
                return
            if all(
                free.get(node_id, {}).get(key, 0.0) + 1e-9 >= value
                for node_id, want in wanted.items()
                for key, value in want.items()
            ):
                return
            time.sleep(0.01)

    def _use(
        self, name: str, group: PlacementGroup, record: dict[str, Any], index: int, rid: str
    ) -> Placement:
        """The task takes bundle ``index`` of the group (written down before its task is sent)."""
        if record["users"].get(rid) != index:
            record["users"][rid] = index
            write(self.dir / f"{name}.json", json.dumps(record))
        self.records.mark(rid, "placement.json", json.dumps({"group": name, "bundle": index}))
        resources = {str(k): float(v) for k, v in record["bundles"][index].items()}
        return Placement(group, name, index, resources)

    def _free_bundle(
        self, job: str, node: str, wanted: dict[str, float]
    ) -> tuple[str, PlacementGroup, dict[str, Any], int] | None:
        """A bundle of the job's live groups on ``node``, as large as ``wanted``, that no task
        holds now."""
        if not job:
            return None
        for name in self._job_groups(job):
            record, group = self._record(name), None
            if record is None:
                continue
            # A bundle no task used yet waits for its own task's start: not free.
            used = {int(i) for i in record["users"].values()}
            held = {int(i) for u, i in record["users"].items() if self._holds(str(u))}
            pairs = zip(record["nodes"], record["bundles"], strict=True)
            for index, (where, bundle) in enumerate(pairs):
                free = index in used and index not in held
                if where != node or not free or not _same(bundle, wanted):
                    continue
                group = group or self._group(name)
                if group is None:
                    break  # removed: none of its bundles is left
                return name, group, record, index
        return None

    def _job_groups(self, job: str) -> list[str]:
        found = self._read(self.dir / f"job-{job}.json") or {}
        return [str(n) for n in found.get("groups", [])]

    def _holds(self, rid: str) -> bool:
        """The task may still run in its bundle: it was submitted and it has not ended."""
        with contextlib.suppress(ValueError):
            return self.records.has(rid, "created") and not self.records.has(rid, "released")
        return False

    def _placement_of(self, rid: str) -> Placement | None:
        placed = self._read(self.records.dir(rid) / "placement.json")
        if placed is None:
            return None
        if placed.get("group") is None:  # alone (``_pinned``)
            bundle = {str(k): float(v) for k, v in placed["resources"].items()}
            return Placement(None, "", 0, bundle, str(placed["node_id"]))
        name, index = str(placed["group"]), int(placed["bundle"])
        record, group = self._record(name), self._group(name)
        if record is None or group is None:
            return None
        resources = {str(k): float(v) for k, v in record["bundles"][index].items()}
        return Placement(group, name, index, resources)

    def _record(self, name: str) -> dict[str, Any] | None:
        return self._read(self.dir / f"{name}.json")

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            found = json.loads(path.read_text())
            return found if isinstance(found, dict) else None
        return None


def _existing(name: str) -> PlacementGroup | None:
    """The live group of that name in this namespace (None: none, or removed)."""
    try:
        found: PlacementGroup = get_placement_group(name)
    except ValueError:
        return None
    return found


def _check_fits(gang: Gang, bundles: list[dict[str, float]], nodes: dict[str, RayNode]) -> None:
    """A group larger than its nodes would wait in Ray forever: refused at once instead."""
    wanted: dict[str, dict[str, float]] = {}
    for member, bundle in zip(gang.members, bundles, strict=True):
        on_node = wanted.setdefault(member.node, {})
        for key, value in bundle.items():
            on_node[key] = on_node.get(key, 0.0) + value
    for name, want in wanted.items():
        info = nodes[name].info
        has = {"CPU": info.cpu_milli / 1000, "GPU": float(info.gpu_count)}
        for key, value in want.items():
            if value > has[key] + 1e-9:
                raise ValueError(
                    f"Ray could not place the gang on node {name}: its tasks there ask for "
                    f"{value:g} {key}, the node has {has[key]:g}"
                )


def _bundle(member: GangMember, gpus: float) -> dict[str, float]:
    """A task's bundle: its CPUs and Ray's GPUs for it (Ray refuses a bundle of zeros)."""
    bundle = {"CPU": max(member.cpu_milli / 1000, 0.0)}
    if gpus > 0:
        bundle["GPU"] = gpus
    if not any(bundle.values()):
        bundle["CPU"] = MIN_CPU
    return bundle


def _same(bundle: dict[str, Any], wanted: dict[str, float]) -> bool:
    keys = set(bundle) | set(wanted)
    return all(abs(float(bundle.get(k, 0)) - wanted.get(k, 0.0)) < 1e-6 for k in keys)


def _gpus(member: GangMember) -> float:
    """Ray's GPUs for a task of the gang: whole GPUs, or the share of one."""
    if member.gpus == 1 and 0 < member.gpu_milli < 1000:
        return member.gpu_milli / 1000
    return float(member.gpus)


def _gang(request: LaunchRequest) -> Gang:
    """The gang the task reserves its place with. An elastic job's task (its rendezvous
    endpoint in its environment: backends/rendezvous.py) reserves alone: its job shrinks one
    task at a time, and Ray frees a group's bundle only with the whole group, so the tasks
    that stay would hold the room of the one taken back, which aipaas gave to another job."""
    if rendezvous.ENDPOINT_VARIABLES[0] in request.env:
        return _alone(request)
    return gang_of(request) or _alone(request)


def _alone(request: LaunchRequest) -> Gang:
    """A task the controller told no gang for, or an elastic job's: a gang of one."""
    member = GangMember(0, request.task, request.node, 0, 0, request.cpu_milli)
    return Gang(request.request_id, (member,), "")
