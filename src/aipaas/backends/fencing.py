"""Fencing tokens on the backend side: a start whose token is lower than the highest seen is
refused, so a controller that lost its lease (a slow cycle, a paused process) cannot start
anything once its successor has.

The highest token is kept in a file beside the backend's records, under an advisory lock
(``flock``) held across the start itself: every process of a host that shares the run
directory sees it, and a start with a lower token cannot slip in after a higher one.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from aipaas.backends.base import (
    Backend,
    FencingRefused,
    Inventory,
    LaunchRequest,
    TaskStatus,
    membership_files,
)
from aipaas.backends.probe_exec import probe_exec_of
from aipaas.backends.service_endpoints import endpoint_owners
from aipaas.backends.task_exec import ExecResult, TaskSession, task_exec_of, task_sessions_of

log = logging.getLogger("aipaas.backends")

#: the file beside a backend's records (no request id starts with a dot: never a task's)
FENCING_FILE = ".fencing-token"


class TokenFile:
    """The highest fencing token a backend has accepted, persisted in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def admit(self, token: int | None, what: str) -> Iterator[None]:
        """Hold the lock while the caller starts ``what``; raise ``FencingRefused`` when
        ``token`` is below the highest seen. ``None`` (a controller without a lease: tests,
        ``simulate``) is let through without raising the mark, but only while no controller
        with a lease has ever started anything here (the highest seen is 0): once one has, a
        start without a token may come from a controller that lost its lease and is refused."""
        # Opened per start (a few microseconds): a descriptor kept open would have to be
        # closed by whoever drops the backend, and the lock goes with the descriptor.
        if token is None and not self.path.exists():
            yield  # no token ever seen here (a file is never removed: no race to fear)
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            highest = _read(fd)
            if token is None:
                if highest > 0:
                    log.warning(
                        "fencing: start of %s without a token refused (seen %d)", what, highest
                    )
                    raise FencingRefused(
                        f"fencing: start of {what} carries no token, "
                        f"but this backend has seen token {highest}"
                    )
                yield
                return
            if token < highest:
                log.warning(
                    "fencing: start of %s with token %d refused (seen %d)", what, token, highest
                )
                raise FencingRefused(
                    f"fencing: start of {what} carries token {token}, "
                    f"but this backend has seen token {highest}"
                )
            if token > highest:
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, f"{token}\n".encode())
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def highest(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return 0
        try:
            return _read(fd)
        finally:
            os.close(fd)


def _read(fd: int) -> int:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode(errors="replace").strip()
    return int(text) if text.isdigit() else 0


class Fenced:
    """Any backend with fencing on its starts (the local backend's token file sits in its
    run directory)."""

    def __init__(self, inner: Backend, tokens: TokenFile) -> None:
        self.inner = inner
        self.name = inner.name
        self.tokens = tokens

    def inventory(self) -> Inventory:
        return self.inner.inventory()

    def start(self, request: LaunchRequest) -> None:
        with self.tokens.admit(request.fencing_token, request.request_id):
            self.inner.start(request)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self.inner.stop(request_id, grace_seconds)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        return self.inner.status(request_ids)

    def endpoint_owner(self, request_id: str, port: int) -> bool | None:
        inner = endpoint_owners(self.inner)
        return inner.endpoint_owner(request_id, port) if inner is not None else None

    def exec_task(
        self, request_id: str, command: Sequence[str], timeout: float
    ) -> ExecResult | None:
        # not fenced: a command in a running task changes nothing the controller decides
        inner = task_exec_of(self.inner)
        return inner.exec_task(request_id, command, timeout) if inner is not None else None

    def open_session(
        self, request_id: str, command: Sequence[str], *, tty: bool, rows: int, cols: int
    ) -> TaskSession | None:
        # not fenced, as exec_task
        inner = task_sessions_of(self.inner)
        if inner is None:
            return None
        return inner.open_session(request_id, command, tty=tty, rows=rows, cols=cols)

    def probe_exec(self, request_id: str, command: Sequence[str], timeout: float) -> str | None:
        inner = probe_exec_of(self.inner)
        if inner is None:
            return "this backend cannot run exec probes"
        return inner.probe_exec(request_id, command, timeout)

    def membership_file(self, node: str, tenant: str, job: str) -> str | None:
        inner = membership_files(self.inner)
        return inner.membership_file(node, tenant, job) if inner is not None else None

    def update_membership(self, tenant: str, job: str, payload: Mapping[str, object]) -> None:
        inner = membership_files(self.inner)
        if inner is not None:
            inner.update_membership(tenant, job, payload)

    def close(self) -> None:
        self.inner.close()
