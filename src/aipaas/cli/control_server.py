"""`aipaas server` and `aipaas up`: build the store, backend, controller and API, and serve."""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from aipaas.backends.registry import make_backend
from aipaas.client import config_path, save_config
from aipaas.controller.cycle import Controller
from aipaas.controller.loop import ControllerLoop
from aipaas.metering.metrics import Metrics
from aipaas.server.app import create_app
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.settings import Settings, env_overrides
from aipaas.store import Store


def register(app: typer.Typer) -> None:
    app.command("server")(server)
    app.command("up")(up)


DataDir = Annotated[Path, typer.Option("--data-dir", help="Database, token, logs live here.")]
Host = Annotated[str, typer.Option("--host", help="Address to listen on.")]
Backend = Annotated[str, typer.Option("--backend", help="local, sim or demo (both).")]
Db = Annotated[str | None, typer.Option("--db", help="postgresql://... instead of SQLite.")]
SimCluster = Annotated[Path | None, typer.Option("--sim-cluster", help="YAML of sim nodes.")]
LocalCpus = Annotated[
    float | None, typer.Option("--local-cpus", help="CPU cores this machine offers to tasks.")
]
LogLevel = Annotated[str, typer.Option("--log-level", help="uvicorn log level.")]


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
    log_level: LogLevel = "info",
) -> None:
    """Serve the API (OpenAPI at /docs) with the controller in the same process."""
    settings = Settings(
        **{
            **env_overrides(os.environ),
            "data_dir": data_dir,
            "host": host,
            "port": port,
            "backend": backend,
            **({"db_url": db} if db else {}),
            "sim_cluster": sim_cluster,
            "local_cpus": local_cpus,
            "controller": not no_controller,
            "tick_seconds": tick,
        }
    )
    serve(settings, log_level=log_level)


def up(
    data_dir: DataDir = Path(".aipaas"),
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port; another if busy.")] = 8600,
    backend: Backend = "demo",
    sim_cluster: SimCluster = None,
    local_cpus: LocalCpus = None,
    log_level: LogLevel = "warning",
) -> None:
    """Start aipaas on embedded defaults: SQLite, sim nodes plus this machine; print URL, token."""
    if not _port_free(host, port):
        port = _free_port(host)
    settings = Settings(
        **{
            **env_overrides(os.environ),
            "data_dir": data_dir,
            "host": host,
            "port": port,
            "backend": backend,
            "sim_cluster": sim_cluster,
            "local_cpus": local_cpus,
        }
    )
    serve(settings, log_level=log_level, announce=True)


def serve(settings: Settings, *, log_level: str = "info", announce: bool = False) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(settings.database_url)
    token = ensure_admin_token(store, settings.token_file, settings.bootstrap_token)
    if token is not None:
        _err(f"created the platform-admin token; it is in {settings.token_file} (owner-only)")
    metrics = Metrics()
    loop: ControllerLoop | None = None
    if settings.controller:
        backend = make_backend(
            settings.backend,
            settings.run_dir,
            sim_cluster=settings.sim_cluster,
            local_cpu_milli=int(settings.local_cpus * 1000) if settings.local_cpus else None,
        )
        controller = Controller(store, backend, log_dir=settings.log_dir, metrics=metrics)
        loop = ControllerLoop(controller, settings.tick_seconds)
    app = create_app(
        store,
        metrics=metrics,
        on_start=loop.start if loop else None,
        on_stop=loop.stop if loop else None,
        is_ready=loop.is_ready if loop else None,
        max_body_bytes=settings.max_body_bytes,
    )
    url = f"http://{settings.host}:{settings.port}"
    if announce:
        admin = token or _read(settings.token_file)
        save_config(config_path(os.environ), url, admin or "")
        print(f"aipaas is up at {url} (API docs: {url}/docs)", flush=True)
        print(f"token: {admin or '(see ' + str(settings.token_file) + ')'}", flush=True)
        print(f"the CLI is configured ({config_path(os.environ)}); try:", flush=True)
        print("  aipaas apply -f examples/hello.yaml && aipaas get jobs", flush=True)
    else:
        _err(f"aipaas server on {url} (backend {settings.backend}, data in {settings.data_dir})")
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=log_level in ("debug", "trace"),
    )
    store.close()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
