"""The supervisor of one task process: ``python -I .../runner.py DIR``.

It runs in its own session (so it outlives a killed server) and as the server's user (root when
tasks are isolated: it must write the exit record in the root-only run directory). It reads
what to start from DIR/launch.json (written by the backend: command, environment, working
directory, uid and gid), starts the command as that user with no supplementary group, umask
077, in that directory (entered as the user, so a working directory the user may not enter is
refused by the system), passes a stop's SIGTERM (or SIGINT) on to the task's process group once
(a second stop, and the runner's own copy of the signal, are not passed on), SIGKILLs the group
``grace`` seconds later (launch.json; the job's terminationGracePeriodSeconds) if anything of it
is left and, when the task ends, writes its exit code to DIR/exit atomically. A directory
with a pid but no exit file and no live runner is a task that was lost.

The task's output (stdout and stderr) comes to the runner through a pipe, and the runner writes
it to the task's log within a cap (``LogSink``, when launch.json has ``log``): the first
``head`` bytes go to the log file itself, then a rotated tail of segment files in the directory
``<log>.tail/``, each named ``from-<offset>`` after the offset of its first byte in the whole
output; the two newest segments are kept, older ones deleted. While the log's disk has less than
``min_free`` bytes free, output is dropped rather than written. Readers (server/logs.py) see the
offsets missing between the pieces and say there how many bytes were dropped. A write error
(the disk full anyway) drops that output too: the runner never dies of its task's output, or
the task would be taken for lost.

A task with an image (launch.json ``container``) is a ``podman run`` the runner starts as
itself (root: podman needs it; the container runs as the task's user): a stop is the
``container.stop`` command (``podman stop -t GRACE``: one SIGTERM to the task, SIGKILL after
the grace), not a signal to the group; the podman client is SIGKILLed ``CONTAINER_MARGIN``
seconds after the grace if it is still there, and ``container.remove`` removes the container
when the client ends. The memory group the container is made under (``cgroups``) is not joined:
its counters say whether the limit was hit (``limit_hit``). A job's ``spec.setup``
(launch.json ``setup``: backends/setup.py) runs before the task, its output in the task's log;
if it fails, the task is not started and DIR/setup-failed says so.

The runner's own environment is the backend's minimal one, not the task's: a job's variables
(PYTHONPATH, LD_PRELOAD...) never reach a process that runs as root. It is run as a file, not
as a module of the package, and imports the standard library only: it starts in tens of
milliseconds instead of the package's second, the window in which a stop could find it
without its signal handlers.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

LAUNCH_FILE = "launch.json"  # written by backend.py into DIR

UMASK = 0o077
#: in DIR: the task was killed by the OOM killer of its memory limit (backend.py reads it)
OOM_FILE = "oom"
#: in DIR: the job's setup failed, the task never started (backend.py reads it)
SETUP_FAILED_FILE = "setup-failed"
#: after a container's grace period, how long its podman client has to end before it is
#: SIGKILLed (the container is then removed: ``container.remove``)
CONTAINER_MARGIN = 3.0
#: between a stop's SIGTERM and its SIGKILL, when launch.json does not say (``grace``)
DEFAULT_GRACE_SECONDS = 30.0
EXIT_NOT_STARTED = 127
TAIL_SUFFIX = ".tail"  # <log>.tail/from-<offset>: the rotated tail (server/logs.py reads it)
SEGMENT_PREFIX = "from-"
KEEP_SEGMENTS = 2
READ_SIZE = 1 << 16
#: after the task ended, how long output still coming (a child it left behind holding the
#: pipe) is copied before the exit code is written: the task's end is not held up by it
DRAIN_SECONDS = 2.0


class LogSink:
    """The task's output into its log, within ``head`` bytes plus a tail of two segments of
    ``segment`` bytes, and nothing while the log's disk has under ``min_free`` bytes free."""

    def __init__(self, path: str, head: int, segment: int, min_free: int) -> None:
        self.path = path
        self.head = head
        self.segment = max(segment, 1)
        self.min_free = min_free
        self.tail_dir = path + TAIL_SUFFIX
        self._head_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.offset = os.fstat(self._head_fd).st_size  # bytes of output so far, dropped or not
        self._written = self.offset  # the end of what is on disk
        self._head_whole = True  # the head file holds every byte up to ``offset``
        self._current: tuple[int, int] | None = None  # the open segment: (descriptor, size)
        self.dropped = 0

    def write(self, data: bytes) -> None:
        if not self._room():
            self._drop(len(data))
            return
        while data:
            if self._head_whole:
                # The runner's own lines (a stop's SIGKILL notice) go to the log file directly:
                # counted as output here, so that offsets stay those of the file.
                self.offset = max(self.offset, os.fstat(self._head_fd).st_size)
            if self._head_whole and self.offset < self.head:
                size = min(len(data), self.head - self.offset)
                written = self._put(self._head_fd, data[:size])
                if written < size:
                    self._head_whole = False  # a gap now: the rest goes to the tail
            else:
                self._head_whole = False
                if self._current is None or self._current[1] >= self.segment:
                    self._rotate()
                if self._current is None:  # could not open a segment: dropped
                    self._drop(len(data))
                    return
                descriptor, filled = self._current
                size = min(len(data), self.segment - filled)
                written = self._put(descriptor, data[:size])
                self._current = (descriptor, filled + written)
                if written < size:
                    self._close_segment()  # the next write starts a segment after the gap
            self.offset += written
            if written:
                self._written = self.offset
            if written < size:
                self._drop(size - written)
            data = data[size:]

    def close(self) -> None:
        """The last output was dropped (the disk short of room): an empty segment at the
        output's end, so that readers see the gap before it and say how much is missing."""
        self._close_segment()
        os.close(self._head_fd)
        if self.offset > self._written:
            with contextlib.suppress(OSError):
                os.makedirs(self.tail_dir, mode=0o700, exist_ok=True)
                name = os.path.join(self.tail_dir, f"{SEGMENT_PREFIX}{self.offset}")
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o600))

    def _put(self, descriptor: int, data: bytes) -> int:
        """Write all of ``data``; how much was written before an error (the disk full)."""
        done = 0
        while done < len(data):
            try:
                done += os.write(descriptor, data[done:])
            except InterruptedError:
                continue
            except OSError:
                return done
        return done

    def _drop(self, count: int) -> None:
        self.offset += count
        self.dropped += count
        self._head_whole = False
        self._close_segment()

    def _room(self) -> bool:
        if self.min_free <= 0:
            return True
        try:
            stat = os.statvfs(os.path.dirname(self.path) or ".")
        except OSError:
            return True  # cannot tell: the write says
        return stat.f_bavail * stat.f_frsize >= self.min_free

    def _rotate(self) -> None:
        self._close_segment()
        try:
            os.makedirs(self.tail_dir, mode=0o700, exist_ok=True)
            name = os.path.join(self.tail_dir, f"{SEGMENT_PREFIX}{self.offset}")
            descriptor = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return
        self._current = (descriptor, 0)
        segments = sorted(
            (int(entry[len(SEGMENT_PREFIX) :]), entry)
            for entry in os.listdir(self.tail_dir)
            if entry.startswith(SEGMENT_PREFIX) and entry[len(SEGMENT_PREFIX) :].isdigit()
        )
        for _start, entry in segments[:-KEEP_SEGMENTS]:  # the oldest: its bytes are dropped
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.tail_dir, entry))

    def _close_segment(self) -> None:
        if self._current is not None:
            os.close(self._current[0])
            self._current = None


def copy_output(source: int, sink: LogSink, child: subprocess.Popen[bytes]) -> None:
    """Copy the task's output from the pipe ``source`` to ``sink`` until the pipe ends, or
    ``DRAIN_SECONDS`` after the task ended (what it left behind may hold the pipe)."""
    drain_until: float | None = None
    while True:
        if drain_until is None and child.poll() is not None:
            drain_until = time.monotonic() + DRAIN_SECONDS
        # The pipe's end comes with the task's in the common case: the timeout only matters
        # when something the task left behind keeps the pipe open.
        wait = 1.0 if drain_until is None else max(0.0, drain_until - time.monotonic())
        ready, _, _ = select.select([source], [], [], wait)
        if ready:
            data = os.read(source, READ_SIZE)
            if not data:
                return
            sink.write(data)
        elif drain_until is not None and time.monotonic() >= drain_until:
            return


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: runner DIR (DIR holds launch.json)", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    spec: dict[str, Any] = json.loads((directory / LAUNCH_FILE).read_text())
    command = [str(part) for part in spec["command"]]
    uid, gid = spec.get("uid"), spec.get("gid")
    cwd = str(spec["cwd"])

    grace = float(spec.get("grace", DEFAULT_GRACE_SECONDS))
    stopped: list[int] = []
    child: subprocess.Popen[bytes] | None = None
    container = spec.get("container")  # a task in an image: podman, run as the runner itself
    run_uid, run_gid = (None, None) if isinstance(container, dict) else (uid, gid)
    #: the command a stop runs instead of a signal (the running container's ``podman stop``)
    stopper: list[list[str]] = []

    def stop_task(signum: int) -> None:
        # The task's group (the runner's: the task and whatever it started) gets the signal
        # once; the runner's own copy of it is ignored (``forward``). SIGKILL follows after
        # the grace period (``kill_group``), whatever the task does with the signal.
        delay = grace
        if stopper and isinstance(container, dict):  # the container's stop sends the SIGTERM
            with contextlib.suppress(OSError):
                subprocess.Popen(
                    stopper[-1],
                    env={str(k): str(v) for k, v in container["env"].items()},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # not in the group the SIGKILL below reaches
                )
            delay = grace + CONTAINER_MARGIN
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(0, signum)
        signal.signal(signal.SIGALRM, kill_group)
        signal.setitimer(signal.ITIMER_REAL, max(delay, 0.001))

    def forward(signum: int, _frame: FrameType | None) -> None:
        if stopped:
            return  # one stop, one signal: a second stop (or the runner's own) is not passed on
        stopped.append(signum)
        if child is not None and child.poll() is None:
            stop_task(signum)
        # not started yet: it will not be, or be stopped at once (below)

    def kill_group(_signum: int, _frame: FrameType | None) -> None:
        if child is not None and child.poll() is None:
            os.write(2, f"aipaas: still running {grace:g}s after SIGTERM: SIGKILL\n".encode())
        kill_others_in_group()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    if stopped:  # stopped before anything started: nothing will
        _write_exit(directory, 128 + stopped[0])
        return 0

    def enter() -> None:
        # After the uid change (subprocess sets groups, gid, uid before this hook): the
        # directory is entered with the task's rights, not root's.
        try:
            os.chdir(cwd)
        except OSError as err:
            os.write(2, f"aipaas: cannot enter the working directory {cwd}: {err}\n".encode())
            os._exit(EXIT_NOT_STARTED)

    log = spec.get("log")
    sink = None
    reader = writer = None
    if isinstance(log, dict):  # else (a launch.json of an older server) the runner's stdio
        try:
            sink = LogSink(
                str(log["path"]), int(log["head"]), int(log["segment"]), int(log["min_free"])
            )
            reader, writer = os.pipe()
        except OSError as err:  # the task runs all the same, its output to the runner's stdio
            print(f"aipaas: the log cannot be capped: {err}", file=sys.stderr, flush=True)
            sink = None
    archive = spec.get("unpack")
    if isinstance(archive, str):  # the job's uploaded workdir, unpacked by the task's user
        if not unpack(archive, str(spec.get("unpack_into") or cwd), uid, gid):
            _write_exit(directory, EXIT_NOT_STARTED)
            return EXIT_NOT_STARTED
        if stopped:
            _write_exit(directory, 128 + stopped[0])
            return 0
    setup = spec.get("setup")
    if isinstance(setup, dict):  # the job's spec.setup, once per node (backends/setup.py)
        # a pipe of its own, read while it runs (pip's output would fill the task's pipe)
        setup_reader, setup_writer = os.pipe() if sink is not None else (None, None)
        try:
            child = subprocess.Popen(
                [str(part) for part in setup["command"]],
                stdout=setup_writer,
                stderr=subprocess.STDOUT if setup_writer is not None else None,
                env={str(k): str(v) for k, v in setup["env"].items()},
                user=run_uid,
                group=run_gid,
                extra_groups=[] if run_uid is not None else None,
                umask=UMASK,
                preexec_fn=None if isinstance(container, dict) else enter,
            )
        except (OSError, subprocess.SubprocessError) as err:
            print(f"aipaas: setup failed: cannot start it: {err}", file=sys.stderr, flush=True)
            return _setup_failed(directory, EXIT_NOT_STARTED)
        if isinstance(setup.get("stop"), list):
            stopper.append([str(part) for part in setup["stop"]])
        if stopped:
            stop_task(stopped[0])
        if sink is not None and setup_reader is not None and setup_writer is not None:
            os.close(setup_writer)
            copy_output(setup_reader, sink, child)
            os.close(setup_reader)
        code = child.wait()
        stopper.clear()
        if stopped:
            _write_exit(directory, 128 + stopped[0])
            return 0
        if code != 0:
            if sink is not None:
                sink.close()
            return _setup_failed(directory, code if code > 0 else 128 - code)
        child = None
    groups = [str(g) for g in spec.get("cgroups") or []]  # the task's limits (limits.py)
    # the child is made in them (the runner leaves them after); a container is made in a group
    # of its own under them by podman (``--cgroup-parent``): they are not joined then
    homes = {} if isinstance(container, dict) else join_groups(groups)
    if homes is None:
        _write_exit(directory, EXIT_NOT_STARTED)
        return EXIT_NOT_STARTED
    if isinstance(container, dict):
        stopper.append([str(part) for part in container["stop"]])
    try:
        child = subprocess.Popen(  # stdio: the pipe to the log sink, or the runner's own
            command,
            stdout=writer,
            stderr=subprocess.STDOUT if writer is not None else None,
            env={str(k): str(v) for k, v in spec["env"].items()},
            user=run_uid,
            group=run_gid,
            extra_groups=[] if run_uid is not None else None,
            umask=UMASK,
            preexec_fn=None if isinstance(container, dict) else enter,  # single-threaded: safe
        )
    except (OSError, subprocess.SubprocessError) as err:
        print(f"aipaas: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
        leave_groups(groups, homes)
        _write_exit(directory, EXIT_NOT_STARTED)
        return EXIT_NOT_STARTED
    if groups and not isinstance(container, dict):  # the OOM killer takes the task, not the runner
        with contextlib.suppress(OSError):
            Path("/proc/self/oom_score_adj").write_text("-1000")
    if stopped:  # the stop came while it was being started
        stop_task(stopped[0])
    if sink is not None and reader is not None and writer is not None:
        os.close(writer)  # the task holds the only write end: its end ends the pipe
        copy_output(reader, sink, child)
        sink.close()
    code = child.wait()
    if code < 0:
        code = 128 - code  # killed by signal N -> 128+N, as a shell reports it
    if isinstance(container, dict):
        remove_container([str(part) for part in container["remove"]], container["env"])
        # killed (137), not by a stop, in a group that reached its limit: the OOM killer
        over = not stopped and code == 128 + signal.SIGKILL and limit_hit(groups)
        remove_parent_groups(str(container.get("cgroup_parent") or ""))
    else:
        over = oom_killed(groups)
    if over:  # said in the task's status (backend.py reads the mark)
        print("aipaas: OOMKilled: the task went over its memory limit", file=sys.stderr)
        with contextlib.suppress(OSError):
            (directory / OOM_FILE).write_text("OOMKilled\n")
    leave_groups(groups, homes)
    _write_exit(directory, code)
    return 0


def remove_container(command: list[str], env: dict[str, Any]) -> None:
    """The task's container, once its podman client ended (killed, it may still run)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            command,
            env={str(k): str(v) for k, v in env.items()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )


def limit_hit(groups: list[str]) -> bool:
    """Whether a container made under the task's memory group reached the group's limit. The
    kernel counts an OOM kill in the group of the process it killed (the container's own, gone
    when the container is): the group above keeps its peak and its failed charges."""
    for group in groups:
        try:
            limit = int(Path(group, "memory.limit_in_bytes").read_text())
            peak = int(Path(group, "memory.max_usage_in_bytes").read_text())
            failures = int(Path(group, "memory.failcnt").read_text())
        except (OSError, ValueError):
            continue
        if failures > 0 or peak >= limit:
            return True
    return False


def _setup_failed(directory: Path, code: int) -> int:
    with contextlib.suppress(OSError):
        (directory / SETUP_FAILED_FILE).write_text(f"{code}\n")
    _write_exit(directory, code)
    return code


def join_groups(groups: list[str]) -> dict[str, str] | None:
    """Move the runner into the task's cgroups (its task, started next, is made in them);
    the groups it came from, by controller directory, to go back to. None (said) on failure."""
    homes: dict[str, str] = {}
    for group in groups:
        mount = "/".join(group.split("/")[:5])  # /sys/fs/cgroup/<controller>
        controller = mount.rsplit("/", 1)[1]
        homes[group] = mount + _own_group(controller)
        try:
            Path(group, "cgroup.procs").write_text(str(os.getpid()))
        except OSError as err:
            print(f"aipaas: cannot join the cgroup {group}: {err}", file=sys.stderr, flush=True)
            leave_groups(groups, homes)
            return None
    return homes


def leave_groups(groups: list[str], homes: dict[str, str]) -> None:
    """Back to the runner's own groups, and the task's removed (left if something of the
    task still lives in one: removing it then fails, harmlessly)."""
    for group in groups:
        if group in homes:
            with contextlib.suppress(OSError):
                Path(homes[group], "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):
            os.rmdir(group)


def remove_parent_groups(parent: str) -> None:
    """The groups podman made under a container's ``--cgroup-parent`` in every controller
    (conmon's, the parent itself): removed bottom-up, each only if empty (rmdir refuses a
    group with a process in it)."""
    if not parent.startswith("/"):
        return
    with contextlib.suppress(OSError):
        mounts = [entry.path for entry in os.scandir("/sys/fs/cgroup") if entry.is_dir()]
    for mount in mounts if parent else []:
        top = mount + parent
        if not os.path.isdir(top):
            continue
        for root, _dirs, _files in sorted(os.walk(top), key=lambda item: -len(item[0])):
            with contextlib.suppress(OSError):
                os.rmdir(root)


def oom_killed(groups: list[str]) -> bool:
    """Whether the kernel's OOM killer killed a process in the task's memory group."""
    for group in groups:
        try:
            control = Path(group, "memory.oom_control").read_text()
        except OSError:
            continue
        for line in control.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return True
    return False


def _own_group(controller: str) -> str:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path.rstrip("/") or ""
    return ""


def unpack(archive: str, into: str, uid: int | None, gid: int | None) -> bool:
    """Unpack the tar.gz ``archive`` (opened here, as root) into ``into`` in a child process
    that is the task's user (``uid``/``gid``; None: the runner's own): what it writes is the
    user's, and a path the archive names can reach nothing that user could not. tarfile's
    ``data`` filter refuses absolute paths, ``..``, links that leave ``into`` and device
    files (the server refused them at upload already). False, said in the log, on failure."""
    # Imported here, not at the top (the runner's start stays fast, see above), and before the
    # fork: the task's user may not be able to read this Python's library (pyenv under /root).
    import gzip
    import tarfile

    assert gzip.GzipFile is not None  # tarfile opens .gz through it, imported lazily

    try:
        source = os.open(archive, os.O_RDONLY)
    except OSError as err:
        print(f"aipaas: cannot read the job's workdir {archive}: {err}", file=sys.stderr)
        return False
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: the task's user from here on, never back
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if uid is not None and gid is not None:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            os.umask(UMASK)
            os.chdir(into)
            with (
                os.fdopen(source, "rb") as handle,
                tarfile.open(fileobj=handle, mode="r:gz") as tar,
            ):
                tar.extractall(".", filter="data")
        except BaseException as err:  # the child must end here, whatever happened
            os.write(2, f"aipaas: cannot unpack the job's workdir: {err}\n".encode())
            code = 1
        os._exit(code)
    os.close(source)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            return False
    return os.waitstatus_to_exitcode(status) == 0


def kill_others_in_group() -> None:
    """SIGKILL every process of the runner's group but the runner (it must write the exit)."""
    me = os.getpid()
    group = os.getpgid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # fields: state, ppid, pgrp
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


def _write_exit(directory: Path, code: int) -> None:
    temporary = directory / "exit.tmp"
    temporary.write_text(f"{code}\n")
    os.replace(temporary, directory / "exit")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
