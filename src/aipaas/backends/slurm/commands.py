"""Slurm's own commands, run as processes: ``sinfo --json``, ``squeue --json``, ``sbatch``,
``scancel``. Nothing else of Slurm is linked or spoken (slurmrestd refuses root and needs a
socket of its own): the commands are what every Slurm site has.

Every command gets ``SLURM_CONF`` when the backend was given a slurm.conf (else Slurm's default,
/etc/slurm/slurm.conf) and a time limit: a slurmctld that does not answer makes the call raise
``SlurmError``, which the controller takes as "unknown", never as "gone".
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: a controller cycle waits for these calls: slurmctld answers in milliseconds when healthy
DEFAULT_TIMEOUT_SECONDS = 15.0


class SlurmError(Exception):
    """A Slurm command failed or did not answer in time."""


class SlurmCommands:
    def __init__(
        self, conf: Path | None = None, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        self.conf = conf
        self.timeout_seconds = timeout_seconds
        env = dict(os.environ)
        if conf is not None:
            env["SLURM_CONF"] = str(conf)
        # sbatch copies the submitter's environment unless told otherwise: the server's own
        # variables (tokens, database URL) must never reach a job (the scripts say --export).
        self._env = env

    def run(self, args: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                list(args),
                env=self._env,
                capture_output=True,
                text=True,
                timeout=self.timeout_seconds,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as err:
            raise SlurmError(f"{args[0]} not found: is Slurm installed here?") from err
        except subprocess.TimeoutExpired as err:
            raise SlurmError(f"{args[0]} did not answer in {self.timeout_seconds:g}s") from err
        if done.returncode != 0:
            problem = (done.stderr or done.stdout).strip().splitlines()
            raise SlurmError(
                f"{' '.join(args[:2])} failed ({done.returncode}): "
                + (problem[-1] if problem else "no message")
            )
        return done.stdout

    def _json(self, args: Sequence[str], key: str) -> list[dict[str, Any]]:
        text = self.run(args)
        try:
            found = json.loads(text)
        except json.JSONDecodeError as err:
            raise SlurmError(f"{args[0]} --json printed no JSON: {text[:200]!r}") from err
        errors = found.get("errors") or []
        if errors:
            raise SlurmError(f"{args[0]}: {errors}")
        items = found.get(key)
        if not isinstance(items, list):
            raise SlurmError(f"{args[0]} --json has no {key!r} list")
        return [item for item in items if isinstance(item, dict)]

    def nodes(self) -> list[dict[str, Any]]:
        """Every node as ``sinfo --json`` gives it (name, address, cpus, real_memory, gres,
        state, state_flags, partitions, features, reason)."""
        return self._json(["sinfo", "--json"], "nodes")

    def jobs(self) -> list[dict[str, Any]]:
        """Every job slurmctld still knows, finished ones too (kept MinJobAge seconds).
        ``squeue --json`` ignores --name in 22.05: the caller filters."""
        return self._json(["squeue", "--json", "--states=all"], "jobs")

    def accounted(self, job_id: int) -> dict[str, Any] | None:
        """A job slurmctld no longer holds, from accounting (``sacct``; needs slurmdbd): in
        squeue's terms (``job_state``, ``exit_code`` as a wait status). None when accounting
        has no such job; raises ``SlurmError`` when there is no accounting at all. Parsable
        text, not --json: its shape is the same in every version."""
        out = self.run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "JobID,State,ExitCode"])
        for line in out.splitlines():
            fields = line.split("|")
            if len(fields) != 3 or fields[0] != str(job_id):
                continue
            code, _, signal = fields[2].partition(":")
            status = (int(code) << 8 if code.isdigit() else 0) | (
                int(signal) & 0x7F if signal.isdigit() else 0
            )
            state = fields[1].split()[0] if fields[1] else "UNKNOWN"  # "CANCELLED by 0"
            return {"job_id": job_id, "job_state": state, "exit_code": status}
        return None

    def accounting_records(self, job_ids: Sequence[int]) -> list[dict[str, Any]]:
        """The jobs' records in accounting (``sacct --json``; raises ``SlurmError`` where the
        cluster keeps none): ``job_id``, ``state``, ``time`` (``start``, ``end``), ..."""
        ids = ",".join(str(j) for j in job_ids)
        return self._json(["sacct", "--json", "-X", "-j", ids], "jobs") if ids else []

    def submit(self, args: Sequence[str], script: Path) -> int:
        out = self.run(["sbatch", "--parsable", *args, str(script)]).strip()
        try:
            return int(out.split(";")[0])
        except ValueError as err:
            raise SlurmError(f"sbatch printed no job id: {out[:200]!r}") from err

    def cancel(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self.run(["scancel", *(str(j) for j in job_ids)])
