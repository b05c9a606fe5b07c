"""Slurm's own commands, run as processes: ``sinfo --json``, ``squeue``, ``sbatch``,
``scancel``, ``sacct``. Nothing else of Slurm is linked or spoken (slurmrestd refuses root and
needs a socket of its own): the commands are what every Slurm site has.

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

from aipaas.backends.task_exec import TIMED_OUT_CODE, ExecResult, capped

#: a controller cycle waits for these calls: slurmctld answers in milliseconds when healthy
DEFAULT_TIMEOUT_SECONDS = 15.0
#: the PATH of an ``aipaas exec`` step (none of the server's variables reach it)
STEP_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: what ``jobs`` reads of each job, in squeue's ``--Format`` names and this order; the name
#: last, since a name (not one of ours) may hold the separator
SQUEUE_FIELDS = ("JobID", "State", "Reason", "StartTime", "EndTime", "exit_code", "Name")
SQUEUE_SEPARATOR = "|"


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
        env["SLURM_TIME_FORMAT"] = "%s"  # squeue's times as seconds since the epoch
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

    def step(self, job_id: int, command: Sequence[str], *, cwd: str, timeout: float) -> ExecResult:
        """``command`` as a step of the running job ``job_id`` beside its batch step (``srun
        --overlap``: it takes none of the job's resources), in ``cwd``, with a PATH and none of
        the server's variables; killed after ``timeout`` seconds (TIMED_OUT_CODE)."""
        args = self.step_command(job_id, command, cwd=cwd, pty=False)
        try:
            done = subprocess.run(
                args,
                env=self._env,
                capture_output=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as err:
            raise SlurmError("srun not found: is Slurm installed here?") from err
        except subprocess.TimeoutExpired as err:
            output = (err.stdout or b"") + f"aipaas: still running after {timeout:g}s\n".encode()
            return ExecResult(TIMED_OUT_CODE, capped(output))
        return ExecResult(done.returncode, capped(done.stdout + done.stderr))

    def step_command(
        self, job_id: int, command: Sequence[str], *, cwd: str, pty: bool
    ) -> list[str]:
        """The ``srun`` that runs ``command`` as ``step`` does; with ``pty``, in a terminal of
        the step's own (``--pty``: srun's input must then be a terminal, which it relays)."""
        return [
            "srun",
            "--overlap",
            f"--jobid={job_id}",
            "--nodes=1",
            "--ntasks=1",
            f"--chdir={cwd}",
            f"--export=PATH={STEP_PATH}",
            "--quiet",
            *(["--pty"] if pty else []),
            "--",
            *command,
        ]

    @property
    def environment(self) -> dict[str, str]:
        """The environment Slurm's commands run with (SLURM_CONF, when given)."""
        return dict(self._env)

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
        """This user's jobs slurmctld still knows, finished ones too (kept MinJobAge seconds),
        with squeue's JSON keys: ``job_id``, ``job_state``, ``state_reason``, ``start_time``,
        ``end_time``, ``exit_code`` (a wait status), ``name``.

        Text, not ``--json``: the controller asks every cycle, and the JSON of every job the
        cluster keeps (hundreds of ended ones after a burst) was 1.6 MB and a fifth of a second
        for 700 jobs, most of a cycle; these seven fields are 40 kB and 15 ms."""
        layout = ",".join(f"{name}:{SQUEUE_SEPARATOR}" for name in SQUEUE_FIELDS[:-1])
        out = self.run(["squeue", "--noheader", "--me", "--states=all", f"--Format={layout},Name:"])
        return parse_squeue(out)

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


def parse_squeue(text: str) -> list[dict[str, Any]]:
    """``jobs``'s squeue lines as squeue's JSON records (22.05's shapes)."""
    found: list[dict[str, Any]] = []
    for line in text.splitlines():
        fields = line.split(SQUEUE_SEPARATOR, len(SQUEUE_FIELDS) - 1)
        if len(fields) != len(SQUEUE_FIELDS) or not fields[0].strip().isdigit():
            continue  # an array or heterogeneous job's part (never one of ours), or noise
        job_id, state, reason, start, end, status, name = (f.strip() for f in fields)
        found.append(
            {
                "job_id": int(job_id),
                "job_state": state,
                "state_reason": reason,
                "start_time": int(start) if start.isdigit() else 0,  # N/A, Unknown: none
                "end_time": int(end) if end.isdigit() else 0,
                "exit_code": _wait_status(status),
                "name": name,
            }
        )
    return found


def _wait_status(text: str) -> int | None:
    """squeue's exit code: a wait status (``768``: code 3), or ``code:signal`` as sacct
    writes it; None when it has none."""
    code, colon, signal = text.partition(":")
    if not colon:
        return int(code) if code.isdigit() else None
    if not (code.isdigit() and signal.isdigit()):
        return None
    return int(code) << 8 | int(signal) & 0x7F
