"""``--backend slurm``: the Slurm backend with fencing on its starts (its token file sits in
its run directory, as the local backend's does)."""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.base import Backend
from aipaas.backends.fencing import FENCING_FILE, Fenced, TokenFile
from aipaas.backends.slurm.backend import MODES, SlurmBackend
from aipaas.backends.slurm.submitter import WORKERS


def slurm_backend(run_dir: Path, conf: Path | None, mode: str) -> Backend:
    if mode not in MODES:
        raise ValueError(f"--slurm-mode {mode!r}: one of {', '.join(MODES)}")
    backend = SlurmBackend(run_dir, conf=conf, mode=mode, submit_workers=WORKERS)
    return Fenced(backend, TokenFile(backend.run_dir / FENCING_FILE))
