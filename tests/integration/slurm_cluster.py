"""A throwaway Slurm cluster for the Slurm backend's tests: scripts/slurm_cluster.sh (munged,
slurmctld and two slurmds, n1 and n2, with four fake A100s each) in a temporary directory,
started once per module that uses the fixture and stopped after it.

Slurm comes from Debian's slurm-wlm and munge, which scripts/test.sh installs when absent (as
root, with apt). The tests skip only when those programs are not here, and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm_cluster.sh"
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
#: the accounting mode's: slurmdbd and a MariaDB server of its own
ACCOUNTING_PROGRAMS = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db")


def unavailable_reason(accounting: bool = False) -> str | None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing): scripts/test.sh installs "
            "slurm-wlm and munge with apt when run as root"
        )
    missing = [p for p in ACCOUNTING_PROGRAMS if accounting and shutil.which(p) is None]
    if missing:
        return (
            f"Slurm accounting is not installed ({', '.join(missing)} missing): scripts/test.sh "
            "installs slurmdbd and mariadb-server with apt when run as root"
        )
    return None


ACTIVE = frozenset({"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"})


def _state(job: dict[str, Any]) -> str:
    state = job.get("job_state")
    return str(state[0] if isinstance(state, list) and state else state)


@dataclass
class SlurmCluster:
    directory: Path
    conf: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        done = subprocess.run(
            list(args), env=self.env(), capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: {done.stderr}")
        return done.stdout

    def jobs(self) -> list[dict[str, Any]]:
        """aipaas's jobs slurmctld knows, ended ones too (``squeue --json`` ignores --states
        and --name in 22.05: filtered here)."""
        found = json.loads(self.run("squeue", "--json", "--states=all"))
        return [j for j in found["jobs"] if str(j.get("name", "")).startswith("aipaas.")]

    def active_jobs(self) -> list[dict[str, Any]]:
        """aipaas's jobs Slurm has not ended (pending, running, completing)."""
        return [j for j in self.jobs() if _state(j) in ACTIVE]

    def node_state(self, name: str) -> str:
        return self.run("sinfo", "-h", "-N", "-n", name, "-o", "%T").strip()

    def drain(self, name: str, reason: str = "aipaas test") -> None:
        self.run("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def resume(self, name: str) -> None:
        self.run("scontrol", "update", f"NodeName={name}", "State=RESUME")


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    yield from _cluster(accounting=False)


@pytest.fixture(scope="module")
def slurm_accounting_cluster() -> Iterator[SlurmCluster]:
    """The same cluster with slurmdbd (and its MariaDB): sacct answers."""
    yield from _cluster(accounting=True)


def _cluster(*, accounting: bool) -> Iterator[SlurmCluster]:
    reason = unavailable_reason(accounting)
    if reason is not None:
        pytest.skip(reason)
    directory = Path(tempfile.mkdtemp(prefix="aipaas-slurm-"))
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(directory), "2", "4"]
        + (["accounting"] if accounting else []),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        if started.returncode != 0:
            raise RuntimeError(f"the Slurm cluster did not start: {started.stderr[-3000:]}")
        yield SlurmCluster(directory, directory / "slurm.conf")
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(directory)], timeout=60, check=False)
        shutil.rmtree(directory, ignore_errors=True)
