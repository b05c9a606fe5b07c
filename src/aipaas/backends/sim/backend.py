"""Simulated tasks: started, they 'run' for their declared duration on the clock, then succeed.

Records (start time, duration, stop) are lines of a journal, ``run_dir/sim/journal.jsonl``, so
a restarted server finds its simulated tasks where they were, like the local backend finds its
processes. A line is appended per change, the newest line of a task wins; every process appends
with one write each and reads what others appended before it answers (a controller that takes
the lease over sees its predecessor's tasks). One file rather than one per task: a file per task
cost the controller a third of its time when thousands of short jobs arrived at once.

Starts carry the controller lease's fencing token: one lower than the highest seen is refused
(backends/fencing.py; the token file sits beside the journal).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import Inventory, LaunchRequest, NodeInfo, TaskState, TaskStatus
from aipaas.backends.fencing import FENCING_FILE, TokenFile
from aipaas.backends.sim import journal
from aipaas.backends.sim.pool import SimPoolNodes
from aipaas.clock import Clock, SystemClock, isoformat

DEFAULT_DURATION = 5.0
DEFAULT_JOURNAL_RECORDS = 100_000
EXIT_CODE_ANNOTATION = "sim.aipaas.dev/exit-code"  # a simulated task ends with this code


class SimBackend(SimPoolNodes):
    name = "sim"

    def __init__(
        self,
        run_dir: Path,
        nodes: Sequence[NodeInfo],
        clock: Clock | None = None,
        default_duration: float = DEFAULT_DURATION,
        slices: Sequence[ResourceSlice] = (),
        journal_max_records: int = DEFAULT_JOURNAL_RECORDS,
        journal_max_age_seconds: float = journal.DEFAULT_MAX_AGE_SECONDS,
    ) -> None:
        self.run_dir = run_dir.resolve() / "sim"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = tuple(nodes)
        self.slices = tuple(s for s in slices if s.spec.node_name in {n.name for n in nodes})
        self._names = {node.name for node in nodes}
        self.clock = clock or SystemClock()
        self.default_duration = default_duration
        self._records: dict[str, dict[str, Any]] = {}
        self._journal = str(self.run_dir / "journal.jsonl")
        self._read_to = 0  # the journal is read up to here
        self._appender: io.FileIO | None = None  # the journal, open for appending while in use
        self._log_dirs: set[str] = set()
        # Finished tasks the journal keeps; it is rewritten when it has twice the lines it
        # kept the last time (journal.py), so a rewrite costs O(1) a line over time.
        self.journal_max_records = journal_max_records
        self.journal_max_age_seconds = journal_max_age_seconds
        self._lines = 0  # lines in the journal up to _read_to
        self._kept = 0  # records the last rewrite kept
        # The highest fencing token seen, beside the journal: starts with a lower one refused.
        self.fencing = TokenFile(self.run_dir / FENCING_FILE)
        self._load_task_files()
        self._catch_up()
        self._init_pool()  # node pools (backends/sim/pool.py)

    def inventory(self) -> Inventory:
        pool_nodes, pool_slices, draining = self.pool_inventory()
        if not pool_nodes:
            return Inventory(self.nodes, frozenset({"simulated", "gpu"}), self.slices)
        # A draining pool node is reported as not taking work: nothing new lands there.
        return Inventory(
            (*self.nodes, *pool_nodes),
            frozenset({"simulated", "gpu"}),
            (*self.slices, *pool_slices),
            unknown=frozenset(draining),
        )

    def start(self, request: LaunchRequest) -> None:
        if request.node not in self._names and not self.is_pool_node(request.node):
            return
        _check_request_id(request.request_id)
        with self.fencing.admit(request.fencing_token, request.request_id):
            self._start(request)

    def _start(self, request: LaunchRequest) -> None:
        self._catch_up()
        if request.request_id in self._records:
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
            "node": request.node,
            "stopped": None,
            "exit_code": _exit_code(request.annotations.get(EXIT_CODE_ANNOTATION)),
        }
        self._save(request.request_id, data)
        line = (
            f"[sim] {isoformat(now)} {request.task} started on {request.node} "
            f"(GPUs {list(request.gpus)}) for {duration:g}s; this is a simulated task\n"
        )
        self._append_log(request.log_path, line)

    def membership_file(self, node: str, tenant: str, job: str) -> str | None:
        """Elastic jobs' membership files, beside the journal."""
        if node not in self._names:
            return None
        return str(self.run_dir / "membership" / tenant / f"{job}.json")

    def update_membership(self, tenant: str, job: str, payload: Mapping[str, object]) -> None:
        path = self.run_dir / "membership" / tenant / f"{job}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(path.name + ".tmp")
        temp.write_text(json.dumps(payload))
        os.replace(temp, path)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self._catch_up()
        data = self._records.get(request_id)
        if data is not None and data.get("stopped") is None:
            data["stopped"] = self.clock.now().timestamp()
            self._save(request_id, data)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        self._catch_up()
        now = self.clock.now().timestamp()
        answer = {rid: self._status(rid, now) for rid in request_ids}
        self._trim_journal()
        return answer

    def _busy_nodes(self) -> set[str]:
        """Nodes where a task of the journal runs now (a pool node there is not removed)."""
        self._catch_up()
        now = self.clock.now().timestamp()
        return {
            str(data["node"])
            for data in self._records.values()
            if data.get("node")
            and data.get("stopped") is None
            and now - data["start"] < data["duration"]
        }

    def close(self) -> None:
        if self._appender is not None:
            self._appender.close()
            self._appender = None

    def _journal_fd(self) -> int:
        if self._appender is None:
            self._appender = io.FileIO(self._journal, "a+")  # unbuffered: a write is one write
        return self._appender.fileno()

    def _status(self, request_id: str, now: float) -> TaskStatus:
        data = self._records.get(request_id)
        if data is None:
            return TaskStatus(request_id, TaskState.UNKNOWN)
        if data.get("stopped") is not None:
            return TaskStatus(request_id, TaskState.FAILED, 143, "stopped")
        if now - data["start"] < data["duration"]:
            return TaskStatus(request_id, TaskState.RUNNING)
        code = int(data.get("exit_code") or 0)
        if not data.get("logged_end"):
            data["logged_end"] = True
            self._save(request_id, data)
            self._append_log(
                data["log"],
                f"[sim] {data['task']} finished after {data['duration']:g}s "
                f"with exit code {code}\n",
            )
        state = TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
        return TaskStatus(request_id, state, code, f"exit code {code}")

    def _save(self, request_id: str, data: dict[str, Any]) -> None:
        line = json.dumps({"id": request_id, **data}, separators=(",", ":")) + "\n"
        encoded = line.encode()
        while True:
            self._catch_up()
            fd = self._journal_fd()
            fcntl.flock(fd, fcntl.LOCK_SH)  # no rewrite of the journal while we append
            if not journal.replaced(fd):
                break
            fcntl.flock(fd, fcntl.LOCK_UN)  # rewritten meanwhile: catch up with the new one
        try:
            os.write(fd, encoded)  # one write: appends of processes never interleave
            if os.fstat(fd).st_size == self._read_to + len(encoded):
                self._read_to += len(encoded)  # no one else appended: no need to read it back
                self._lines += 1
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._records[request_id] = data

    def _trim_journal(self) -> None:
        """Rewrite the journal without the finished tasks it need not keep (journal.py)."""
        if self._lines <= max(self.journal_max_records, 2 * self._kept):
            return
        fd = self._journal_fd()
        with journal.locked(fd, exclusive=True):
            if journal.replaced(fd):
                return  # another process rewrote it just now
            self._catch_up()
            now = self.clock.now().timestamp()
            records = journal.kept(
                self._records, now, self.journal_max_records, self.journal_max_age_seconds
            )
            size = journal.rewrite(self._journal, records)
        self.close()  # the appender is open on the file just replaced
        self._records = records
        self._read_to = size
        self._lines = self._kept = len(records)

    def _append_log(self, path: str, line: str) -> None:
        directory = os.path.dirname(path)
        if directory not in self._log_dirs:
            try:
                os.mkdir(directory)  # a job's directory, under the tenant's that exists
            except FileExistsError:
                pass
            except FileNotFoundError:
                os.makedirs(directory, exist_ok=True)
            self._log_dirs.add(directory)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def _catch_up(self) -> None:
        """Read what was appended since last time (by this process or another)."""
        fd = self._journal_fd()
        found = os.fstat(fd)
        if found.st_nlink == 0:  # another process rewrote it (journal.replaced): read it anew
            self.close()
            self._records, self._read_to, self._lines = {}, 0, 0
            fd = self._journal_fd()
            found = os.fstat(fd)
        size = found.st_size
        if size <= self._read_to:
            return
        chunk = os.pread(fd, size - self._read_to, self._read_to)
        complete = chunk.rfind(b"\n") + 1  # a crash may have left half a line at the end
        if complete == 0:
            return
        for raw in chunk[:complete].splitlines():
            try:
                data = json.loads(raw)
            except ValueError:
                continue  # the half line a crash left; the next write starts a new line
            self._records[str(data.pop("id"))] = data
        self._read_to += complete
        self._lines += chunk.count(b"\n", 0, complete)
        if complete < len(chunk):
            self._end_half_line()

    def _end_half_line(self) -> None:
        os.write(self._journal_fd(), b"\n")

    def _load_task_files(self) -> None:
        """Records of the file-per-task layout of earlier versions."""
        for path in self.run_dir.glob("*.json"):
            try:
                self._records[path.stem] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue


def _check_request_id(request_id: str) -> None:
    if "/" in request_id or request_id.startswith(".") or "\n" in request_id:
        raise ValueError(f"invalid request id {request_id!r}")


def _exit_code(text: str | None) -> int:
    try:
        return max(0, min(255, int(text))) if text is not None else 0
    except ValueError:
        return 0
