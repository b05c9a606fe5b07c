"""Where a run's Kubernetes tests write which API server they ran against (the kube fixture,
tests/kube/conftest.py, in whichever xdist worker runs them) and where the end of the run reads
it back (tests/conftest.py, in pytest's main process)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def bin_dir() -> Path:
    """The folder of the kube binaries (scripts/kube_build.sh decides it; nothing is built)."""
    found = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kube_build.sh"), "--print-dir"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return Path(found)


def seen_file() -> Path:
    return bin_dir().parent / "last-test-server-version"
