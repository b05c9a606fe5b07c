"""A virtual environment of the tests' own with PyTorch Lightning: the Slurm test of Lightning's
SLURM environment detection (test_pytorch_slurm.py) runs its training script there.

It is made over the model environment (tests/support/model_venv.py, which holds PyTorch): a
``.pth`` file
puts that environment's packages on its path, so pip sees PyTorch installed and adds only
Lightning and what Lightning needs (tens of MB, not 3 GB again). Where: beside the model
environment, ``lightning-venv``; pip's cache is shared with it. Made when absent, reused after.

Run as a module from the repository root (``python -m tests.integration.lightning_venv``) it
makes the environment and prints its Python.
"""

from __future__ import annotations

import fcntl
import shutil
import stat
import subprocess
import time
from pathlib import Path

from tests.support import model_venv

#: pinned: the Lightning the Slurm test was written against
PACKAGES = ("lightning==2.6.6",)
DONE = "aipaas-lightning-venv-complete"


def venv_dir() -> Path:
    return model_venv.venv_dir().parent / "lightning-venv"


def ensure(timeout: float = 1800) -> Path:
    """The environment's Python, made first when absent; ``model_venv.Unavailable`` when pip
    cannot install PyTorch or Lightning (the why in its message)."""
    torch_python = model_venv.ensure(timeout=timeout)
    venv = venv_dir()
    if (venv / DONE).exists():
        return model_venv.python_of(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / DONE).exists():
            return model_venv.python_of(venv)
        return _install(venv, torch_python, timeout)


def _site_packages(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _install(venv: Path, torch_python: Path, timeout: float) -> Path:
    if venv.exists():
        shutil.rmtree(venv)  # a half-made one
    started = time.monotonic()
    try:
        subprocess.run(
            [model_venv.base_python(), "-m", "venv", str(venv)], check=True, capture_output=True
        )
        python = model_venv.python_of(venv)
        # PyTorch comes from the model environment: its packages follow this one's on the path
        Path(_site_packages(python), "aipaas-model-venv.pth").write_text(
            _site_packages(torch_python) + "\n"
        )
        answer = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--cache-dir",
                str(venv.parent / "pip-cache"),
                "--disable-pip-version-check",
                *PACKAGES,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise model_venv.Unavailable(f"could not make {venv}: {err}") from err
    if answer.returncode != 0:
        tail = " | ".join((answer.stdout + answer.stderr).strip().splitlines()[-3:])
        raise model_venv.Unavailable(f"pip install {' '.join(PACKAGES)} failed: {tail}")
    (venv / DONE).write_text(f"installed in {time.monotonic() - started:.0f}s\n")
    for path in (venv, *venv.rglob("*")):  # readable by the tasks' unprivileged users
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode):
            path.chmod(mode | stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0))
    return model_venv.python_of(venv)


if __name__ == "__main__":
    print(ensure())
