"""`aipaas server` and `aipaas up`: the commands. The process they start is built in
control_runtime.py, imported only when one of them runs: every other command stays quick to
start (the server's imports cost about a second)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated, NoReturn

import httpx
import typer

from aipaas.cli import data_dir_lock
from aipaas.cli.failure import EXIT_PORT_TAKEN, fail
from aipaas.settings import Settings, SettingsProblem, build_settings

DEFAULT_PORT = 8600


def register(app: typer.Typer) -> None:
    app.command("server")(server)
    app.command("up")(up)


DataDir = Annotated[Path, typer.Option("--data-dir", help="Database, token, logs live here.")]
Host = Annotated[str, typer.Option("--host", help="Address to listen on.")]
Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="local, sim, demo (both), slurm, ray, kubernetes (AIPAAS_KUBE_CONFIG...), or side"
        " by side: local,slurm,ray.",
    ),
]
SlurmConf = Annotated[
    Path | None,
    typer.Option(
        "--slurm-conf",
        exists=True,
        dir_okay=False,
        help="slurm.conf of the cluster (backend slurm); Slurm's default if unset.",
    ),
]
RayAddress = Annotated[
    str | None, typer.Option("--ray-address", help="The Ray cluster, host:port (backend ray).")
]
SLURM_MODES = ("pinned", "third-party")
SlurmMode = Annotated[
    str,
    typer.Option(
        "--slurm-mode", help="pinned (aipaas picks nodes) or third-party (Slurm places and queues)."
    ),
]
Db = Annotated[str | None, typer.Option("--db", help="postgresql://... instead of SQLite.")]
SimCluster = Annotated[Path | None, typer.Option("--sim-cluster", help="YAML of sim nodes.")]
LocalCpus = Annotated[
    float | None, typer.Option("--local-cpus", help="CPU cores this machine offers to tasks.")
]
LogLevel = Annotated[str, typer.Option("--log-level", help="uvicorn log level.")]
TaskRoot = Annotated[
    Path | None,
    typer.Option("--task-root", help="Tasks' working directories (outside the data dir)."),
]
PoolProfiles = Annotated[
    str | None,
    typer.Option(
        "--pool-profiles",
        help="Scheduler profile per node pool, as gpu-a=fgd,cpu=bestfit (AIPAAS_POOL_PROFILES).",
    ),
]
TaskUser = Annotated[
    str | None,
    typer.Option("--task-user", help="One unprivileged user for all tasks (default: per tenant)."),
]


def server(
    data_dir: DataDir = Path(".aipaas"),
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8600,
    backend: Backend = "local",
    db: Db = None,
    sim_cluster: SimCluster = None,
    local_cpus: LocalCpus = None,
    no_controller: Annotated[bool, typer.Option("--no-controller")] = False,
    tick: Annotated[float, typer.Option("--tick", help="Controller period, seconds.")] = 0.2,
    workers: Annotated[int, typer.Option("--workers", help="API processes.")] = 1,
    task_root: TaskRoot = None,
    task_user: TaskUser = None,
    log_level: LogLevel = "info",
    slurm_conf: SlurmConf = None,
    slurm_mode: SlurmMode = "pinned",
    ray_address: RayAddress = None,
    pool_profiles: PoolProfiles = None,
) -> None:
    """Serve the API (OpenAPI at /docs) with the controller in the same process.

    As root, local tasks run as one unprivileged user per tenant; otherwise as this user.
    """
    if slurm_mode not in SLURM_MODES:
        fail(f"--slurm-mode: {slurm_mode!r} is not one of {', '.join(SLURM_MODES)}")
    _hold(data_dir, "server")
    if workers == 1 and not _port_free(host, port):
        _port_taken(host, port)  # several workers share the port by SO_REUSEPORT: they check
    settings = _settings(
        {
            "data_dir": data_dir,
            "host": host,
            "port": port,
            "backend": backend,
            **({"db_url": db} if db else {}),
            "sim_cluster": sim_cluster,
            "local_cpus": local_cpus,
            "controller": not no_controller,
            "tick_seconds": tick,
            "workers": workers,
            **({"task_root": task_root} if task_root else {}),
            **({"task_user": task_user} if task_user else {}),
            **({"slurm_conf": slurm_conf} if slurm_conf else {}),
            "slurm_mode": slurm_mode,
            **({"ray_address": ray_address} if ray_address else {}),
            **({"pool_profiles": pool_profiles} if pool_profiles else {}),
        }
    )
    _serve(settings, log_level=log_level)


def up(
    data_dir: DataDir = Path(".aipaas"),
    host: Host = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option("--port", help="TCP port [default: 8600, or a free one if it is taken]."),
    ] = None,
    backend: Backend = "demo",
    sim_cluster: SimCluster = None,
    local_cpus: LocalCpus = None,
    log_level: LogLevel = "warning",
    pool_profiles: PoolProfiles = None,
) -> None:
    """Start aipaas on embedded defaults: SQLite, sim nodes plus this machine; print URL, token.

    One `up` per data directory: a second one in the same folder refuses (exit 7)."""
    _hold(data_dir, "up")
    if port is None:
        port = DEFAULT_PORT
        if not _port_free(host, port):
            taken = _taken_message(host, port)
            port = _free_port(host)
            typer.echo(f"{taken}; using port {port} instead (--port chooses)", err=True)
    elif not _port_free(host, port):
        _port_taken(host, port)
    settings = _settings(
        {
            "data_dir": data_dir,
            "host": host,
            "port": port,
            "backend": backend,
            "sim_cluster": sim_cluster,
            "local_cpus": local_cpus,
            **({"pool_profiles": pool_profiles} if pool_profiles else {}),
        }
    )
    data_dir_lock.name_holder(data_dir, f"http://{host}:{port}")
    _serve(settings, log_level=log_level, announce=True)


def _hold(data_dir: Path, verb: str) -> None:
    """This process's claim on the data directory, before anything is written (cli/
    data_dir_lock.py): a second `up` there, or a server beside an `up`, stops here."""
    try:
        data_dir_lock.hold(data_dir, verb=verb)
    except data_dir_lock.Taken as err:
        fail(str(err), EXIT_PORT_TAKEN)


def _settings(options: dict[str, object]) -> Settings:
    """The settings, or one line naming the option or variable that is wrong (exit 2)."""
    try:
        return build_settings(options, os.environ)
    except SettingsProblem as err:
        fail(f"invalid settings: {err}")


def _serve(settings: Settings, *, log_level: str, announce: bool = False) -> None:
    from aipaas.cli import control_runtime
    from aipaas.cli.worker_pool import CannotListen

    try:
        control_runtime.serve(settings, log_level=log_level, announce=announce)
    except CannotListen as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(EXIT_PORT_TAKEN) from err


def _port_taken(host: str, port: int) -> NoReturn:
    typer.echo(f"error: {_taken_message(host, port)}: choose another with --port", err=True)
    raise typer.Exit(EXIT_PORT_TAKEN)


def _taken_message(host: str, port: int) -> str:
    """Whose the port is, when it can tell: an aipaas server answers /api/v1/whoami without a
    token with its own error document."""
    url = f"http://{host}:{port}"
    try:
        answer = httpx.get(url + "/api/v1/whoami", timeout=0.5)
        if answer.status_code == 401 and answer.json().get("code") == "Unauthenticated":
            return f"port {port} on {host} is taken by an aipaas server already ({url})"
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return f"port {port} on {host} is taken by another program"


def _port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now: bound as uvicorn binds it, with
    SO_REUSEADDR. Without it, the connections a killed server left in TIME_WAIT or FIN_WAIT
    (kill -9 closes them from this side) made the port look taken for a minute or more after
    a crash, though only a listener can hold it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
