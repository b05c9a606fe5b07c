"""What the image tests share: a tiny image imported from a root filesystem of busybox-static
(``tar -C rootfs -c . | podman import - NAME``: no registry is reachable from these machines),
a file:// dataset, and the jobs that run in the image.

Podman, runc and busybox-static come from Debian (scripts/test.sh installs them as root when
absent); the tests skip only when they are not here, and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from aipaas.backends import containers

IMAGE = "localhost/aipaas-test-busybox:1"
APPLETS = ("sh", "cat", "ls", "id", "pwd", "echo", "dd", "sleep", "hostname", "touch", "wc")
DATA = "the dataset's file\n"


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "tasks in images need a root server (podman as root)"
    missing = [p for p in ("podman", "runc", "busybox") if shutil.which(p) is None]
    if missing:
        return (
            f"{', '.join(missing)} missing: scripts/test.sh installs podman, runc and "
            "busybox-static with apt when run as root"
        )
    busybox = shutil.which("busybox") or "busybox"
    if subprocess.run(["ldd", busybox], capture_output=True, check=False).returncode == 0:
        return (
            f"{busybox} is linked dynamically and the test image has no C library: "
            "scripts/test.sh installs busybox-static with apt when run as root"
        )
    return None


def build_image() -> None:
    """The test image from a root filesystem of busybox-static's applets."""
    conf = Path(tempfile.mkdtemp(prefix="aipaas-podman-")) / "containers.conf"
    conf.write_text(containers.CONTAINERS_CONF)
    busybox = shutil.which("busybox")
    assert busybox is not None
    with tempfile.TemporaryDirectory(prefix="aipaas-rootfs-") as rootfs:
        bin_dir = Path(rootfs, "bin")
        bin_dir.mkdir()
        shutil.copy(busybox, bin_dir / "busybox")
        for applet in APPLETS:
            (bin_dir / applet).symlink_to("busybox")
        for name in ("tmp", "etc", "data"):
            Path(rootfs, name).mkdir()
        Path(rootfs, "tmp").chmod(0o1777)
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            [*containers.podman(), "import", "-", IMAGE],
            stdin=tar.stdout,
            env={**os.environ, containers.CONF_VARIABLE: str(conf)},
            check=True,
            capture_output=True,
        )
        assert tar.wait() == 0


def dataset_root() -> Path:
    """A directory file:// datasets may be read from (the server's dataset_file_roots)."""
    root = Path(tempfile.mkdtemp(prefix="aipaas-files-"))
    root.chmod(0o755)
    (root / "corpus").mkdir()
    (root / "corpus" / "part-0.txt").write_text(DATA)
    return root


def setup_objects(root: Path) -> str:
    return (
        "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n---\n"
        "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n---\n"
        "apiVersion: aipaas/v1\nkind: Dataset\nmetadata: {name: corpus, tenant: acme}\n"
        f"spec: {{source: {json.dumps('file://' + str(root / 'corpus'))}}}\n"
    )


SHOW = (
    'echo "gpus=$CUDA_VISIBLE_DEVICES"; echo "pwd=$(pwd)"; echo "workdir=$AIPAAS_WORKDIR"; '
    'echo "uid=$(id -u)"; echo "data=$(cat /data/corpus/part-0.txt)"; '
    'echo "datavar=$AIPAAS_DATASET_CORPUS_PATH"; echo "rank=$RANK"; '
    'touch written && echo "wrote=$(ls written)"'
)


def seeing_job(name: str, gpus: int) -> str:
    """A job in the image that says what it sees: GPUs, dataset, directory, user."""
    task: dict[str, object] = {
        "name": "w",
        "image": IMAGE,
        "command": ["sh", "-c", SHOW],
        "resources": {"cpu": "100m", "memory": "64Mi", **({"gpu": gpus} if gpus else {})},
    }
    return _job(name, task, datasets=[{"name": "corpus", "mountPath": "/data/corpus"}])


def hog_job(name: str) -> str:
    """A job in the image that asks for 100 MiB at once under a 32 MiB limit."""
    task: dict[str, object] = {
        "name": "w",
        "image": IMAGE,
        "command": ["dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"],
        "resources": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"memory": "32Mi"},
    }
    return _job(name, task)


def _job(name: str, task: dict[str, object], datasets: list[dict[str, str]] | None = None) -> str:
    spec: dict[str, object] = {"queue": "research", "tasks": [task]}
    if datasets:
        spec["datasets"] = datasets
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": spec,
        }
    )


def seen(log: str) -> dict[str, str]:
    """The ``key=value`` lines of a task's log (the CLI prefixes each with its task)."""
    found: dict[str, str] = {}
    for line in log.splitlines():
        text = line.partition(" | ")[2] or line
        key, sep, value = text.partition("=")
        if sep and key.isidentifier():
            found[key] = value
    return found


def skip_unless_available() -> pytest.MarkDecorator:
    reason = unavailable_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")
