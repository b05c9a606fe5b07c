"""Simulated tasks: started, they 'run' for their declared duration on the clock, then succeed.

Records are files under ``run_dir/sim`` (start time and duration), so a restarted server finds
its simulated tasks where they were, like the local backend finds its processes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import Inventory, LaunchRequest, NodeInfo, TaskState, TaskStatus
from aipaas.clock import Clock, SystemClock, isoformat

DEFAULT_DURATION = 5.0
EXIT_CODE_ANNOTATION = "sim.aipaas.dev/exit-code"  # a simulated task ends with this code


class SimBackend:
    name = "sim"

    def __init__(
        self,
        run_dir: Path,
        nodes: Sequence[NodeInfo],
        clock: Clock | None = None,
        default_duration: float = DEFAULT_DURATION,
        slices: Sequence[ResourceSlice] = (),
    ) -> None:
        self.run_dir = run_dir.resolve() / "sim"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = tuple(nodes)
        self.slices = tuple(s for s in slices if s.spec.node_name in {n.name for n in nodes})
        self._names = {node.name for node in nodes}
        self.clock = clock or SystemClock()
        self.default_duration = default_duration
        self._records: dict[str, dict[str, Any]] = {}  # the files, read once

    def inventory(self) -> Inventory:
        return Inventory(self.nodes, frozenset({"simulated", "gpu"}), self.slices)

    def start(self, request: LaunchRequest) -> None:
        if request.node not in self._names:
            return
        record = self._record_path(request.request_id)
        if request.request_id in self._records or record.exists():
            return
        duration = (
            request.duration_seconds
            if request.duration_seconds is not None
            else self.default_duration
        )
        now = self.clock.now()
        data = {
            "start": now.timestamp(),
            "duration": duration,
            "log": request.log_path,
            "task": request.task,
            "stopped": None,
            "exit_code": _exit_code(request.annotations.get(EXIT_CODE_ANNOTATION)),
        }
        self._save(request.request_id, data)
        log = Path(request.log_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as handle:
            handle.write(
                f"[sim] {isoformat(now)} {request.task} started on {request.node} "
                f"(GPUs {list(request.gpus)}) for {duration:g}s; this is a simulated task\n"
            )

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        data = self._load(request_id)
        if data is not None and data.get("stopped") is None:
            data["stopped"] = self.clock.now().timestamp()
            self._save(request_id, data)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        return {rid: self._status(rid) for rid in request_ids}

    def close(self) -> None:
        return None

    def _status(self, request_id: str) -> TaskStatus:
        data = self._load(request_id)
        if data is None:
            return TaskStatus(request_id, TaskState.UNKNOWN)
        now = self.clock.now().timestamp()
        if data.get("stopped") is not None:
            return TaskStatus(request_id, TaskState.FAILED, 143, "stopped")
        if now - data["start"] < data["duration"]:
            return TaskStatus(request_id, TaskState.RUNNING)
        code = int(data.get("exit_code") or 0)
        if not data.get("logged_end"):
            data["logged_end"] = True
            self._save(request_id, data)
            with Path(data["log"]).open("a") as handle:
                handle.write(
                    f"[sim] {data['task']} finished after {data['duration']:g}s "
                    f"with exit code {code}\n"
                )
        state = TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
        return TaskStatus(request_id, state, code, f"exit code {code}")

    def _load(self, request_id: str) -> dict[str, Any] | None:
        data = self._records.get(request_id)
        if data is None:
            path = self._record_path(request_id)
            if not path.exists():
                return None
            data = json.loads(path.read_text())
            self._records[request_id] = data
        return data

    def _save(self, request_id: str, data: dict[str, Any]) -> None:
        self._record_path(request_id).write_text(json.dumps(data))
        self._records[request_id] = data

    def _record_path(self, request_id: str) -> Path:
        if "/" in request_id or request_id.startswith("."):
            raise ValueError(f"invalid request id {request_id!r}")
        return self.run_dir / f"{request_id}.json"


def _exit_code(text: str | None) -> int:
    try:
        return max(0, min(255, int(text))) if text is not None else 0
    except ValueError:
        return 0
