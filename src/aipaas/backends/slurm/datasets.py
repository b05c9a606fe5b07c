"""The Slurm backend's dataset caches: one per Slurm node (backends/node_datasets.py).

A task's job stages its datasets on its node before its command (the batch script runs the
stage, which becomes the command's runner: ``SlurmBackend.start`` asks ``stage_job``). A
background load (prefetch, ``aipaas dataset warm``) is a Slurm job of its own pinned to the
node, named ``aipaas-load.<node>`` (not ``aipaas.``: it is no task), one CPU, that runs the
copier on the entry; Slurm accounts its CPU like any job's.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path

from aipaas.backends.base import LaunchRequest
from aipaas.backends.node_datasets import NodeDatasetCaches
from aipaas.backends.slurm.commands import SlurmCommands
from aipaas.data.entry import Entry

LOAD_JOB_PREFIX = "aipaas-load."
LOAD_MEMORY = "512M"


class SlurmDatasetCaches(NodeDatasetCaches):
    """Mixed into SlurmBackend: ``commands`` and ``run_dir`` are the backend's."""

    commands: SlurmCommands

    def stage_job(self, request: LaunchRequest, directory: Path) -> LaunchRequest:
        """The request whose command stages its datasets first (the files it reads written
        into the job's directory, mode 0600), or the request itself without datasets."""
        staged, files = self.staged(request, directory, None)
        for path, text in files.items():
            _write_private(Path(path), text)
        return staged

    def _start_load(self, node: str, entry: Entry) -> None:
        script = entry.path / "load.sh"
        copier = shlex.join([sys.executable, "-I", "-m", "aipaas.data.copier", str(entry.path)])
        _write_private(script, f"#!/bin/bash\nexec {copier}\n", 0o700)
        options = [
            f"--job-name={LOAD_JOB_PREFIX}{node}",
            "--nodes=1",
            "--ntasks=1",
            "--cpus-per-task=1",
            f"--mem={LOAD_MEMORY}",
            f"--nodelist={node}",
            f"--output={entry.path / 'load.log'}",
            "--open-mode=append",
            "--chdir=/",
            "--no-requeue",
            "--export=NIL",
        ]
        self.commands.submit(options, script)


def _write_private(path: Path, text: str, mode: int = 0o600) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
