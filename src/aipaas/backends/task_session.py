"""An interactive session's process (``aipaas exec -i``): a command started beside a running
task whose input, output, window size and end the API relays over a WebSocket
(server/exec_session.py).

Who calls it: the local backend (backends/local/task_exec.py: the command as the task's user,
or ``podman exec`` into its container) and the Slurm backend (``srun --overlap [--pty]``), each
with the argument list it built. With a terminal the process gets a pseudo-terminal of its own
as its controlling terminal (``setsid --ctty``: a new session whose terminal is the pty), so a
shell prints its prompt and Ctrl-C, typed as a byte, reaches the foreground command; without
one its input is a pipe and its output and errors one pipe together.

Thread-safety: ``read`` is called by one thread and ``write`` by another; ``resize``,
``close_input`` and ``kill`` from any thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Mapping, Sequence

#: what ``read`` returns at most at once
CHUNK_BYTES = 65536
#: how often a read with nothing to read looks whether the process ended: a process that
#: ends while a child it started in the background keeps the output open must still end the
#: session
POLL_SECONDS = 0.25
#: between the SIGTERM and the SIGKILL of ``kill``: srun passes a SIGTERM on to its step
KILL_GRACE_SECONDS = 2.0
SETSID = "/usr/bin/setsid"
#: the input byte a terminal reads as end of input (a shell given it at a prompt exits)
TERMINAL_EOF = b"\x04"


class ProcessSession:
    """A started process and the ends of its terminal or pipes that the server holds."""

    def __init__(self, child: subprocess.Popen[bytes], output: int, input_: int, tty: bool):
        self.child = child
        self.tty = tty
        self._output = output
        self._input: int | None = input_
        self._lock = threading.Lock()

    def read(self, timeout: float | None = None) -> bytes:
        """The next output, as soon as there is some; b"" once the process has ended and
        everything it wrote before has been read.

        Raises:
            TimeoutError: ``timeout`` seconds passed with neither (None: waits as long).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no output in {timeout:g}s")
            ready, _, _ = select.select([self._output], [], [], POLL_SECONDS)
            if ready:
                try:
                    chunk = os.read(self._output, CHUNK_BYTES)
                except OSError as err:  # a pty whose every other end is closed says EIO
                    if err.errno == errno.EIO:
                        return b""
                    raise
                if chunk:
                    return chunk
                return b""
            if self.child.poll() is not None:
                return b""

    def write(self, data: bytes) -> None:
        """Give ``data`` to the process's input; blocks while the process reads none."""
        with self._lock:
            target = self._input
        if target is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            view = memoryview(data)
            while view:
                view = view[os.write(target, view) :]

    def close_input(self) -> None:
        """End of input: a pipe is closed; a terminal is given its end-of-input byte."""
        if self.tty:
            self.write(TERMINAL_EOF)
            return
        with self._lock:
            target, self._input = self._input, None
        if target is not None:
            with contextlib.suppress(OSError):
                os.close(target)

    def resize(self, rows: int, cols: int) -> None:
        """The terminal's window size (the kernel tells its foreground group by SIGWINCH)."""
        if self.tty:
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._output, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def wait(self) -> int:
        """The exit code (128 + the signal's number when a signal ended it, as a shell says)."""
        code = self.child.wait()
        return 128 - code if code < 0 else code

    def kill(self) -> None:
        """SIGTERM to the process's group, SIGKILL after ``KILL_GRACE_SECONDS``; returns at
        once."""
        if self.child.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        timer = threading.Timer(KILL_GRACE_SECONDS, self._signal, (signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def close(self) -> None:
        """Releases the server's ends (after the process has ended, or been killed)."""
        with self._lock:
            ends = {self._output, *([self._input] if self._input is not None else [])}
            self._input = None
        for end in ends:
            with contextlib.suppress(OSError):
                os.close(end)

    def _signal(self, number: int) -> None:
        if self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, number)


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    tty: bool,
    rows: int = 24,
    cols: int = 80,
    uid: int | None = None,
    gid: int | None = None,
    umask: int = -1,
) -> ProcessSession:
    """Start ``argv`` (from /; a working directory is the command's own business) as ``uid``
    and ``gid`` with no other groups, with ``env`` alone.

    Raises:
        OSError: the program cannot be started.
    """
    if tty:
        master, slave = os.openpty()
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            if uid is not None:
                os.fchown(slave, uid, -1)  # the user's own terminal, as login makes it
            child = subprocess.Popen(
                # setsid: a session of its own, whose controlling terminal is its input (the pty)
                [SETSID, "--ctty", *argv],
                env=dict(env),
                user=uid,
                group=gid,
                extra_groups=[] if uid is not None else None,
                umask=umask,
                cwd="/",
                stdin=slave,
                stdout=slave,
                stderr=slave,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return ProcessSession(child, master, os.dup(master), tty=True)
    child = subprocess.Popen(
        list(argv),
        env=dict(env),
        user=uid,
        group=gid,
        extra_groups=[] if uid is not None else None,
        umask=umask,
        cwd="/",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert child.stdin is not None and child.stdout is not None
    # the ends are used as descriptors (Popen's file objects would buffer), and only these:
    # closing the input must be the pipe's last end in this process
    output, input_ = os.dup(child.stdout.fileno()), os.dup(child.stdin.fileno())
    child.stdout.close()
    child.stdin.close()
    return ProcessSession(child, output, input_, tty=False)
