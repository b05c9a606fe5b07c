"""A throwaway PostgreSQL cluster (initdb + pg_ctl on a free port) for tests and benchmarks.

``AIPAAS_TEST_PG_URL`` names an existing server instead. When neither that nor the PostgreSQL
server binaries are present, ``unavailable_reason()`` says so and callers skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, text


def pg_bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def unavailable_reason() -> str | None:
    if os.environ.get("AIPAAS_TEST_PG_URL"):
        return None
    if pg_bin_dir() is None:
        return (
            "PostgreSQL server binaries (initdb, pg_ctl) are not installed "
            "and AIPAAS_TEST_PG_URL is unset"
        )
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser: cannot start PostgreSQL unprivileged"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
    return None


class ThrowawayPostgres:
    """Start with ``start()`` (returns a URL), end with ``stop()``; everything is deleted."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.url = os.environ.get("AIPAAS_TEST_PG_URL", "")
        self._owned = not self.url

    def start(self) -> str:
        if not self._owned:
            return self.url
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(unavailable_reason() or "no PostgreSQL")
        self.root = Path(tempfile.mkdtemp(prefix="aipaas-pg-"))
        data = self.root / "data"
        port = _free_port()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        options = (
            f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-w",
                "-l",
                str(self.root / "log"),
                "start",
            ]
        )
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        return self.url

    def stop(self) -> None:
        if not self._owned or self.root is None:
            return
        bin_dir = pg_bin_dir()
        if bin_dir is not None:
            self._run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(self.root / "data"),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
                check=False,
            )
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def reset(self) -> None:
        """Drop every table (between tests)."""
        engine = create_engine(self.url.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()

    def _run(self, command: list[str], *, check: bool = True) -> None:
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {result.stderr or result.stdout}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
