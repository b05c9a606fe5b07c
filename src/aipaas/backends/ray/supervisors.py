"""The driver's side of the supervisor actors (supervisor.py): its own, and those of the
drivers before it that still hold tasks.

One supervisor per driver process: a detached actor belongs to the Ray job of the driver that
made it, and once that job has ended Ray retires its workers (``Force exiting worker whose job
has exited``), racing the start of any new task the actor would submit (seen here: a task that
had started never reported its end). So a driver submits its tasks only through a supervisor
it made itself, named ``aipaas-supervisor-<key>-<job id>`` (``key``: the run directory's, so
that servers sharing a cluster never touch each other's), and asks an earlier driver's
supervisor (its name is in each task's ``created`` record) about the tasks that one still
holds; an earlier one that holds nothing more is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayError

from aipaas.backends.ray.supervisor import HEAD_RESOURCE, SUPERVISOR_NAME, TaskSupervisor

#: a supervisor's answer when it did not answer in time, and when it is gone
SLOW: dict[str, Any] = {"state": "slow"}
UNKNOWN: dict[str, Any] = {"state": "unknown"}
PENDING: dict[str, Any] = {"state": "pending"}


class Supervisors:
    def __init__(self, run_dir: Path, namespace: str, poll_seconds: float) -> None:
        key = hashlib.sha256(str(run_dir).encode()).hexdigest()[:10]
        self.prefix = f"{SUPERVISOR_NAME}-{key}-"
        self.namespace = namespace
        self.poll_seconds = poll_seconds
        self._handles: dict[str, Any] = {}
        self._own: str | None = None
        self._swept = False
        #: started through this driver's supervisor and not seen there yet: its calls run out
        #: of order, so a poll may come before the start sent just before it
        self._unseen: set[str] = set()

    def own(self) -> tuple[str, Any]:
        """This driver's supervisor (made at its first start, on the head node, no CPU)."""
        if self._own is None:
            name = self.prefix + ray.get_runtime_context().get_job_id()
            self._handles[name] = (
                ray.remote(TaskSupervisor)
                .options(
                    name=name,
                    namespace=self.namespace,
                    lifetime="detached",  # outlives this driver: its tasks go on
                    get_if_exists=True,
                    max_restarts=0,  # a new one would not know the tasks: they are lost
                    num_cpus=0,
                    resources={HEAD_RESOURCE: 0.001},
                    max_concurrency=1000,
                )
                .remote()
            )
            self._own = name
        return self._own, self._handles[self._own]

    def submit(self, request_id: str, spec: dict[str, Any], placement: dict[str, Any]) -> str:
        """The task submitted through this driver's supervisor (not awaited); its name."""
        name, supervisor = self.own()
        self._unseen.add(request_id)
        supervisor.start.remote(request_id, spec, placement)
        return name

    def handle(self, name: str) -> Any:
        """The supervisor of that name, or None when it is gone."""
        found = self._handles.get(name)
        if found is None:
            with contextlib.suppress(ValueError):
                found = self._handles[name] = ray.get_actor(name, namespace=self.namespace)
        return found

    def poll(self, by_name: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
        """Each supervisor's word on its tasks, all asked at once and awaited together at most
        ``poll_seconds`` (a supervisor Ray is still starting answers later: its tasks SLOW)."""
        reports: dict[str, dict[str, Any]] = {}
        refs: dict[str, Any] = {}
        for name, ids in by_name.items():
            handle = self.handle(name)
            if handle is None:  # gone: its tasks died with it
                reports.update(dict.fromkeys(ids, UNKNOWN))
            else:
                refs[name] = handle.poll.remote(ids)
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.poll_seconds)
        for name, ref in refs.items():
            ids = by_name[name]
            if not ray.wait([ref], timeout=0)[0]:
                reports.update(dict.fromkeys(ids, SLOW))
                continue
            try:
                answer: dict[str, Any] = ray.get(ref)
            except ActorDiedError:  # the supervisor died: its tasks died with it
                self._handles.pop(name, None)
                self._unseen.difference_update(ids)
                reports.update(dict.fromkeys(ids, UNKNOWN))
            except RayError:  # unavailable for a while: nothing concluded
                reports.update(dict.fromkeys(ids, SLOW))
            else:
                for rid, report in answer["tasks"].items():
                    if report["state"] != "unknown":
                        self._unseen.discard(rid)
                    elif rid in self._unseen:
                        report = PENDING  # its start not taken yet
                    reports[rid] = report
                if name != self._own and answer["held"] == 0:
                    self._retire(name)
        return reports

    def settle(self, forget: dict[str, list[str]], cancel: dict[str, list[str]]) -> None:
        """Tasks given up are cancelled, ended ones whose ends are written down forgotten."""
        for name, ids in cancel.items():
            handle = self.handle(name)
            if handle is not None and ids:
                handle.cancel.remote(ids)
        for name, ids in forget.items():
            handle = self.handle(name)
            if handle is not None and ids:
                handle.forget.remote(ids)

    def sweep(self) -> None:
        """Once per driver: earlier drivers' supervisors (of this run directory) that hold no
        task any more are killed (the others are, once their last task is written down)."""
        if self._swept:
            return
        self._swept = True
        listed = ray.util.list_named_actors(all_namespaces=True)
        names = [
            str(a["name"])
            for a in listed
            if isinstance(a, dict)
            and a.get("namespace") == self.namespace
            and str(a.get("name", "")).startswith(self.prefix)
            and a.get("name") != self._own
        ]
        for name in names:
            handle = self.handle(name)
            if handle is None:
                continue
            with contextlib.suppress(RayError):
                if not ray.get(handle.tasks.remote(), timeout=self.poll_seconds * 4):
                    self._retire(name)

    def forget_handles(self) -> None:
        self._handles.clear()
        self._own = None
        self._swept = False

    def _retire(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is not None:
            with contextlib.suppress(RayError, ValueError):
                ray.kill(handle, no_restart=True)
