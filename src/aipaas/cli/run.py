"""`aipaas run [OPTIONS] -- CMD...`: a Job from the command line, with the code of a folder.

Who calls it: cli/app.py registers it. It builds the Job manifest (one task, ``--nodes``
replicas, ``--gpus`` each), packs ``--workdir`` into a tar.gz (``.git`` and ``__pycache__``
left out; links kept as links) and uploads it (``POST /api/v1/workdirs``, server/
workdir_routes.py), then applies the Job with ``spec.workdir`` naming the upload. Each task
finds the folder's files in its working directory (``AIPAAS_WORKDIR``), so ``python train.py``
runs the folder's train.py, read by the CLI's user: the server never needs to read the folder.

``--dry-run`` uploads nothing and prints the manifest (``-o yaml`` or ``-o json``); the
workdir's name in it is the digest of the archive that would be sent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import secrets
import tarfile
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from aipaas.cli import failure

#: what is left out of a packed workdir: a repository's history, Python's byte-code caches
SKIPPED = frozenset({".git", "__pycache__"})


def register(app: typer.Typer) -> None:
    app.command("run", no_args_is_help=True)(run)


def run(
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="A folder uploaded into each task's working directory."),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option("--image", help="The container image the tasks run in (podman, the pod's)."),
    ] = None,
    setup: Annotated[
        list[str] | None,
        typer.Option("--setup", help="A shell command run once per node first; repeatable."),
    ] = None,
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="GPUs of each task.")] = 0,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, help="Tasks of the gang (RANK 0..N-1).")
    ] = 1,
    queue: Annotated[str, typer.Option("--queue", help="The queue.")] = "default",
    name: Annotated[
        str | None, typer.Option("--name", help="The job's name (default: run-<random>).")
    ] = None,
    cpu: Annotated[str, typer.Option("--cpu", help="CPUs of each task.")] = "1",
    memory: Annotated[str, typer.Option("--memory", help="Memory of each task.")] = "1Gi",
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Tenant (admins).")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the manifest; upload and submit nothing.")
    ] = False,
    output: Annotated[
        str, typer.Option("--output", "-o", help="With --dry-run: yaml or json.")
    ] = "yaml",
) -> None:
    """Submit COMMAND as a job, with the code of --workdir: aipaas run --workdir . -- python
    train.py"""
    if output not in ("yaml", "json"):
        failure.fail(f"--output: yaml or json, got {output!r}")
    variables = _variables(env or [])
    archive = pack(workdir) if workdir is not None else None
    job_name = name or f"run-{secrets.token_hex(3)}"
    manifest = build_manifest(
        job_name,
        command,
        queue=queue,
        tenant=tenant,
        replicas=nodes,
        gpus=gpus,
        cpu=cpu,
        memory=memory,
        env=variables,
        workdir=None if archive is None else "sha256-" + hashlib.sha256(archive).hexdigest(),
        image=image,
        setup=setup or [],
    )
    if dry_run:
        if output == "json":
            print(json.dumps(manifest, indent=2))
        else:
            print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return
    with failure.client() as client:
        if archive is not None:
            uploaded = client._call(  # the SDK has no upload call: a body of bytes, not an object
                "POST",
                "/workdirs",
                params={"tenant": tenant} if tenant else None,
                content=archive,
                headers={"Content-Type": "application/octet-stream"},
            )
            manifest["spec"]["workdir"] = uploaded["workdir"]
        client.apply(json.dumps(manifest))
    where = f" -t {tenant}" if tenant else ""
    print(f"job/{job_name} submitted; follow it with: aipaas logs job/{job_name}{where} -f")


def build_manifest(
    name: str,
    command: list[str],
    *,
    queue: str,
    tenant: str | None,
    replicas: int,
    gpus: int,
    cpu: str,
    memory: str,
    env: dict[str, str],
    workdir: str | None,
    image: str | None = None,
    setup: list[str] | None = None,
) -> dict[str, Any]:
    """The Job that ``aipaas run`` submits."""
    resources: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        resources["gpu"] = gpus
    task: dict[str, Any] = {"name": "worker", "replicas": replicas, "command": list(command)}
    if image is not None:
        task["image"] = image
    if env:
        task["env"] = env
    task["resources"] = resources
    metadata: dict[str, Any] = {"name": name}
    if tenant:
        metadata["tenant"] = tenant
    spec: dict[str, Any] = {"queue": queue}
    if workdir is not None:
        spec["workdir"] = workdir
    if setup:
        spec["setup"] = list(setup)
    spec["tasks"] = [task]
    return {"apiVersion": "aipaas/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def pack(folder: Path) -> bytes:
    """The folder as a tar.gz, the same bytes for the same files (sorted, gzip time 0)."""
    if not folder.is_dir():
        failure.fail(f"--workdir: {folder} is not a directory")
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in _files(folder):
            relative = path.relative_to(folder).as_posix()
            try:
                tar.add(path, arcname=relative, recursive=False, filter=_plain)
            except OSError as err:
                failure.fail(f"--workdir: cannot read {path}: {err.strerror or err}")
    return buffer.getvalue()


def _files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        base = Path(root)
        found.extend(base / d for d in dirs)
        found.extend(base / f for f in sorted(files))
    return found


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner names or ids: the task's user owns what it unpacks."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _variables(pairs: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            failure.fail(f"--env: write KEY=VALUE, got {pair!r}")
        result[key] = value
    return result
