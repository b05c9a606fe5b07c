"""Who a task runs as, where, and with which environment: the local backend's isolation.

Who calls it: the local backend (backend.py) before it starts a task; the server builds the
policy from its settings (cli/control_runtime.py). Reads the user database, runs ``useradd``.

Two modes, chosen by who the server is:
- The server runs as root: every task runs as an unprivileged user, one per tenant
  (``aipaas-t-<tenant>``, created on demand with no home, no login shell and no supplementary
  group) or one fixed user the operator names. Its working directory is
  ``<task root>/<tenant>/<request id>``: the tenant directory is 0700 and owned by the tenant's
  user, so no other tenant's task can enter it, and the task root lies outside the data
  directory (database, tokens, logs, run records), which is 0700 root.
- The server is not root: it cannot give a task another identity, so tasks share its user. The
  backend says so at start (a warning, and an annotation on its Node); tasks still get their own
  directory outside the data directory and a scrubbed environment, and the data directory and
  token files keep modes 0700/0600 (which protect them from other users, not from the server's).

Every task gets its own HOME (its directory) and an environment built from nothing: a PATH,
LANG, HOME, USER, LOGNAME, then what the job sets (its env and the distributed-training
variables). Nothing of the server's environment (AIPAAS_*, tokens, its HOME) reaches it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

USER_PREFIX: Final = "aipaas-t-"
USER_NAME_MAX: Final = 32  # useradd's limit on Debian (and utmp's)
_SHORTENED: Final = re.compile(r".*-[0-9a-f]{8}")
#: What a task under another user finds on its PATH (the server's PATH may point into the
#: server's home, which that user cannot enter and should not learn about).
TASK_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHARED_TASK_ROOT: Final = Path("/var/lib/aipaas-tasks")
#: The annotation on the local Node that says how tasks are isolated.
ISOLATION_ANNOTATION: Final = "aipaas.dev/task-isolation"


class IsolationError(Exception):
    """A task cannot be given its identity or directory; the task fails with this message."""


@dataclass(frozen=True)
class TaskIdentity:
    """Who one task runs as and where (``uid``/``gid`` None: as the server itself)."""

    user: str
    uid: int | None
    gid: int | None
    home: Path


@dataclass(frozen=True)
class TaskIsolation:
    """The policy: run tasks as other users (``separate``) or as the server (shared).

    Args:
        task_root: where task directories go; must lie outside the data directory.
        separate: tasks run as unprivileged users (needs root).
        fixed_user: with ``separate``, one user for every tenant instead of one per tenant.
    """

    task_root: Path
    separate: bool
    fixed_user: str | None = None

    @classmethod
    def for_server(
        cls, task_root: Path, *, fixed_user: str | None = None, server_uid: int | None = None
    ) -> TaskIsolation:
        """The policy for a server running as ``server_uid`` (default: this process's uid)."""
        uid = os.geteuid() if server_uid is None else server_uid
        if fixed_user is not None:
            _check_fixed_user(fixed_user, uid)
        return cls(task_root.resolve(), separate=uid == 0, fixed_user=fixed_user)

    def describe(self) -> str:
        """One line for the log and the Node annotation."""
        if not self.separate:
            advice = (
                "no isolation was asked for (an embedded backend)"
                if os.geteuid() == 0
                else "run the server as root to give each tenant its own unprivileged user"
            )
            return (
                f"shared: tasks run as the server's own user ({_user_name(os.geteuid())}) and "
                f"can read whatever the server can; {advice}"
            )
        if self.fixed_user is not None:
            return f"user {self.fixed_user}: every task runs as this unprivileged user"
        return f"per-tenant users ({USER_PREFIX}<tenant>), directories under {self.task_root}"


def default_task_root(data_dir: Path, server_uid: int | None = None) -> Path:
    """Where tasks' directories go when the settings do not say.

    A root server's tasks run as other users, who must be able to walk down to their
    directories: a data directory's neighbour may lie under a private one (``/root/.aipaas``),
    so they go under /var/lib, named after the data directory. Otherwise: beside it.
    """
    data = data_dir.resolve()
    uid = os.geteuid() if server_uid is None else server_uid
    if uid != 0:
        return data.with_name(data.name + "-tasks")
    digest = hashlib.sha256(str(data).encode()).hexdigest()[:8]
    return SHARED_TASK_ROOT / f"{data.name.lstrip('.') or 'data'}-{digest}"


def user_name(tenant: str) -> str:
    """``aipaas-t-<tenant>``, shortened with a hash when the tenant's name is long."""
    room = USER_NAME_MAX - len(USER_PREFIX)
    # A short name that looks like a shortened one is shortened too: no tenant can be named
    # into another's user.
    if len(tenant) <= room and not _SHORTENED.fullmatch(tenant):
        return USER_PREFIX + tenant
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:8]
    return f"{USER_PREFIX}{tenant[: room - 9].rstrip('-')}-{digest}"


class TaskPlacer:
    """Gives each task its identity and directory under a policy (users cached per tenant)."""

    def __init__(self, isolation: TaskIsolation, *, useradd: str | None = None) -> None:
        self.isolation = isolation
        self._useradd = useradd
        self._users: dict[str, pwd.struct_passwd] = {}
        self._lock = threading.Lock()
        self._root_ready = False

    def check(self) -> None:
        """Make the task root now (and warn now if task users could not reach it)."""
        self._ensure_root()

    def prepare(self, tenant: str, request_id: str) -> TaskIdentity:
        """The task's identity and its directory (created, owned by the task's user).

        Raises:
            IsolationError: no user could be had, or the directory is not a safe one.
        """
        root = self.isolation.task_root
        self._ensure_root()
        if not self.isolation.separate:
            home = _make_dir(root / tenant, None, None) / request_id
            _make_dir(home, None, None)
            return TaskIdentity(_user_name(os.geteuid()), None, None, home)
        account = self._user(tenant)
        tenant_dir = _make_dir(root / tenant, account.pw_uid, account.pw_gid)
        home = _make_dir(tenant_dir / request_id, account.pw_uid, account.pw_gid)
        return TaskIdentity(account.pw_name, account.pw_uid, account.pw_gid, home)

    def write_tenant_file(self, tenant: str, name: str, text: str) -> Path:
        """A file the tenant's tasks can read, in the tenant's directory (owned by the
        tenant's user where tasks run as one), replaced atomically. Created with O_NOFOLLOW
        and O_EXCL under a random name: a link a task put in its directory is never followed."""
        root = self.isolation.task_root
        self._ensure_root()
        uid = gid = None
        if self.isolation.separate:
            account = self._user(tenant)
            uid, gid = account.pw_uid, account.pw_gid
        directory = _make_dir(root / tenant, uid, gid)
        path = directory / name
        temp = directory / f".{name}.{secrets.token_hex(8)}"
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(descriptor, text.encode())
            if uid is not None and gid is not None:
                os.fchown(descriptor, uid, gid)
        finally:
            os.close(descriptor)
        os.replace(temp, path)
        return path

    def environment(
        self, identity: TaskIdentity, job_env: Mapping[str, str], server_env: Mapping[str, str]
    ) -> dict[str, str]:
        """The task's environment from nothing: PATH, LANG, HOME, USER, then the job's."""
        path = server_env.get("PATH") if not self.isolation.separate else None
        env = {
            "PATH": path or TASK_PATH,
            "LANG": server_env.get("LANG") or "C.UTF-8",
            "HOME": str(identity.home),
            "USER": identity.user,
            "LOGNAME": identity.user,
        }
        env.update(job_env)
        return env

    # helpers ------------------------------------------------------------------------------

    def _ensure_root(self) -> None:
        if self._root_ready:
            return
        root = self.isolation.task_root
        # Others may pass through (to reach their own tenant directory) but not list it; the
        # parents made here get the same mode, whatever the server's umask.
        mode = 0o711 if self.isolation.separate else 0o700
        for directory in [*reversed(root.parents), root]:
            if not directory.exists():
                with contextlib.suppress(FileExistsError):
                    directory.mkdir()
                os.chmod(directory, mode)
        os.chmod(root, mode)
        if self.isolation.separate:
            blocked = _not_traversable(root)
            if blocked is not None:
                log.warning(
                    "task root %s lies under %s, which other users cannot enter: tasks cannot "
                    "enter their directories and fail; choose a task root (task_root) under "
                    "directories with mode o+x",
                    root,
                    blocked,
                )
        self._root_ready = True

    def _user(self, tenant: str) -> pwd.struct_passwd:
        name = self.isolation.fixed_user or user_name(tenant)
        with self._lock:
            known = self._users.get(name)
            if known is None:
                known = self._users[name] = self._find_or_create(name, tenant)
        return known

    def _find_or_create(self, name: str, tenant: str) -> pwd.struct_passwd:
        with contextlib.suppress(KeyError):
            return _checked(pwd.getpwnam(name))
        if self.isolation.fixed_user is not None:
            raise IsolationError(f"the task user {name!r} does not exist")
        useradd = self._useradd or shutil.which("useradd") or "/usr/sbin/useradd"
        command = [
            useradd,
            "--system",
            "--no-create-home",
            "--user-group",
            "--home-dir",
            "/nonexistent",  # each task's HOME is its own directory, set in its environment
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            f"aipaas tasks of tenant {tenant}",
            name,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise IsolationError(f"cannot create the task user {name!r}: {err}") from err
        try:
            account = pwd.getpwnam(name)  # another server process may have made it meanwhile
        except KeyError:
            raise IsolationError(
                f"cannot create the task user {name!r}: {done.stderr.strip() or done.returncode}"
            ) from None
        log.info("created the task user %s (uid %d) for tenant %s", name, account.pw_uid, tenant)
        return _checked(account)


def _checked(account: pwd.struct_passwd) -> pwd.struct_passwd:
    if account.pw_uid == 0 or account.pw_gid == 0:
        raise IsolationError(f"the task user {account.pw_name!r} is privileged (uid or gid 0)")
    return account


def _check_fixed_user(name: str, server_uid: int) -> None:
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"task_user: no user named {name!r} on this machine") from None
    if account.pw_uid in (0, server_uid) or account.pw_gid == 0:
        raise ValueError(
            f"task_user: {name!r} is privileged or the server's own user; name an unprivileged one"
        )


def _make_dir(path: Path, uid: int | None, gid: int | None) -> Path:
    """Create ``path`` (mode 0700, owned by uid:gid) without following a symbolic link.

    Its parent may belong to a task's user, who could put a link where we create: every step
    goes through a descriptor opened with O_NOFOLLOW, so root never chowns what a link names.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        reason = "a symbolic link" if err.errno in (errno.ELOOP, errno.ENOTDIR) else err.strerror
        raise IsolationError(f"cannot use the task directory {path}: {reason}") from err
    try:
        info = os.fstat(descriptor)
        owners = {0, os.geteuid()} | ({uid} if uid is not None else set())
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners:
            raise IsolationError(f"cannot use the task directory {path}: unexpected owner")
        if uid is not None and gid is not None:
            os.fchown(descriptor, uid, gid)
        os.fchmod(descriptor, 0o700)
    finally:
        os.close(descriptor)
    return path


def _not_traversable(path: Path) -> Path | None:
    """The first ancestor of ``path`` that other users cannot pass through, if any."""
    for ancestor in reversed(path.parents):
        try:
            mode = ancestor.stat().st_mode
        except OSError:
            return ancestor
        if not mode & stat.S_IXOTH:
            return ancestor
    return None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
