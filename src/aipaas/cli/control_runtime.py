"""Build and run a server process: store, bootstrap token, backend, controller, API."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

import uvicorn
import yaml
from fastapi import FastAPI

from aipaas.backends.kubernetes.options import KubeOptions
from aipaas.backends.local import LocalOptions, TaskIsolation
from aipaas.backends.local.backend import TaskLogLimits
from aipaas.backends.local.datasets import DatasetCacheConfig
from aipaas.backends.local.isolation import default_task_root
from aipaas.backends.node_datasets import NodeCachesConfig, configure_node_caches
from aipaas.backends.registry import make_backend
from aipaas.backends.task_exec import task_exec_of, task_sessions_of
from aipaas.cli.worker_pool import serve_in_processes
from aipaas.client import config_path
from aipaas.controller.cycle import Controller
from aipaas.controller.extension_set import build_extensions
from aipaas.controller.loop import ControllerLoop
from aipaas.metering.metrics import Metrics, prepare_multiprocess
from aipaas.server import reads
from aipaas.server.app import create_app
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.server.exec_routes import TaskExecutor
from aipaas.server.exec_session import Session, SessionOpener
from aipaas.server.log_watch import LogWatch
from aipaas.settings import Settings
from aipaas.store import Store
from aipaas.store.database import make_engine
from aipaas.store.health import DamagedDatabase, WriteProbe, check_sqlite_file, sqlite_file
from aipaas.store.lease import Lease, holder_id
from aipaas.store.trim import EventLimits, EventTrim

GIL_SWITCH_INTERVAL_SECONDS = 0.0005
SETTINGS_ENV = "AIPAAS_SERVER_SETTINGS"  # hands the settings to uvicorn's worker processes


def serve(settings: Settings, *, log_level: str = "info", announce: bool = False) -> None:
    """Migrate, make the first admin token, then serve (in ``settings.workers`` processes)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    quiet_loggers(announce=announce)
    try:
        local_options(settings)  # a wrong task user is an error now, not in every worker
    except ValueError as err:
        _err(f"aipaas server: {err}")
        raise SystemExit(2) from err
    _private_dir(settings.data_dir)
    _check_database(settings)
    store = Store.open(settings.database_url)
    token = ensure_admin_token(store, settings.token_file, settings.bootstrap_token)
    store.close()
    if settings.token_file.exists():
        os.chmod(settings.token_file, 0o600)  # one written by an older version, or by hand
    if token is not None and not announce:  # `up`'s banner below says it, first
        _err(f"created the platform-admin token; it is in {settings.token_file} (owner-only)")
    url = f"http://{settings.host}:{settings.port}"
    if announce:
        admin = token or _read(settings.token_file)
        # The CLI config of the person who started `up` (their own config directory), owner
        # only; tasks never get that HOME (each has its own, and as root its own user).
        _write_private(config_path(os.environ), yaml.safe_dump({"url": url, "token": admin or ""}))
        print(f"aipaas is up at {url} (API docs: {url}/docs)", flush=True)
        kept = f"kept in {settings.token_file}, owner-only"
        print(f"token: {admin} ({kept})" if admin else f"token: ({kept})", flush=True)
        print(f"the CLI is configured ({config_path(os.environ)}); try:", flush=True)
        for variable in ("AIPAAS_URL", "AIPAAS_TOKEN"):
            if variable in os.environ:  # it wins over the config just written (client.py)
                print(f"  (unset {variable} first: set in this shell, it wins)", flush=True)
        for line in try_lines(Path.cwd(), os.environ.get("PATH", "")):
            print(f"  {line}", flush=True)
    else:
        _err(f"aipaas server on {url} (backend {settings.backend}, data in {settings.data_dir})")
    options = {
        "host": settings.host,
        "port": settings.port,
        "log_level": log_level,
        "access_log": log_level in ("debug", "trace"),
        # The client is the socket's peer: uvicorn would otherwise take X-Forwarded-For from
        # any local caller, who could then pose as another address (to a service's replicas).
        "proxy_headers": False,
    }
    if settings.workers == 1:
        uvicorn.run(make_app(settings), **options)  # type: ignore[arg-type]
        return
    # Several API processes; each also runs a controller loop, and the lease lets one work.
    # A scrape may reach any of them: their metrics go through shared files.
    prepare_multiprocess(settings.data_dir / "metrics")
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
    serve_in_processes("aipaas.cli.control_runtime:app_from_env", settings.workers, options)


#: loggers that say a line per HTTP request the server makes (a service replica's health
#: check every second, a webhook, a dataset's pages, the Kubernetes backend's httpx2 client):
#: their warnings are kept, not the rest
PER_REQUEST_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2")


def quiet_loggers(*, announce: bool) -> None:
    """Keep the server's log to what a person reads: no line per outbound request (169 a
    minute with one service), and for `aipaas up` (``announce``) no line per database
    migration around its banner (a first start runs them all)."""
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    if announce:
        logging.getLogger("alembic").setLevel(logging.WARNING)


#: probes' paths: an access log (--log-level debug) leaves their requests out
HEALTH_PATHS = ("/healthz", "/readyz", "/livez")


class SkipHealthChecks(logging.Filter):
    """Drops uvicorn's access-log records of health checks (a probe every few seconds)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        path = args[2] if isinstance(args, tuple) and len(args) > 2 else ""
        return not (isinstance(path, str) and path.split("?")[0] in HEALTH_PATHS)


def try_lines(cwd: Path, search_path: str) -> list[str]:
    """Commands to try that work as printed: this installation's `aipaas` by the path the
    shell finds it at (or its full path when it is not on PATH), the example if it is here."""
    mine = Path(sys.argv[0]).resolve() if Path(sys.argv[0]).name == "aipaas" else None
    mine = mine or Path(sys.executable).parent / "aipaas"
    found = shutil.which("aipaas", path=search_path)
    command = "aipaas"
    if found is None or Path(found).resolve() != mine.resolve():
        command = _relative(mine, cwd)
    lines = []
    example = cwd / "examples" / "hello.yaml"
    if example.is_file():
        lines.append(f"{command} apply -f examples/hello.yaml")
        lines.append(f"{command} wait job/hello --for=phase=Succeeded --timeout 60s -t acme")
        lines.append(f"{command} logs job/hello -t acme")
    lines.append(f"{command} get nodes")
    return lines


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def app_from_env() -> FastAPI:
    """uvicorn's factory in each worker process."""
    return make_app(Settings.model_validate_json(os.environ[SETTINGS_ENV]))


def make_app(settings: Settings) -> FastAPI:
    """One process's API, with its controller loop (which works while it holds the lease)."""
    # The group-commit writer and the controller wait on the database and then on the GIL; with
    # the default 5 ms switch interval the busy event loop kept them waiting up to 5 ms after
    # each answer (measured interleaved, PostgreSQL: 548/601/570 against 963/782/714 a second).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    logging.getLogger("uvicorn.access").addFilter(SkipHealthChecks())  # in every worker
    store = Store(make_engine(settings.database_url))
    metrics = Metrics()
    loop: ControllerLoop | None = None
    executor: TaskExecutor | None = None
    opener: SessionOpener | None = None
    if settings.controller:
        backend = make_backend(
            settings.backend,
            settings.run_dir,
            sim_cluster=settings.sim_cluster,
            local_cpu_milli=int(settings.local_cpus * 1000) if settings.local_cpus else None,
            local=local_options(settings),
            sim_journal_max_records=settings.sim_journal_max_records,
            sim_journal_max_age_seconds=settings.sim_journal_max_age_seconds,
            slurm_conf=settings.slurm_conf,
            slurm_mode=settings.slurm_mode,
            ray_address=settings.ray_address,
            kube=kube_options(settings),
        )
        configure_node_caches(backend, node_caches_config(settings))  # Slurm's, Ray's nodes
        executor = task_executor(backend)  # aipaas exec (server/exec_routes.py)
        opener = session_opener(backend)  # aipaas exec -i (server/exec_session.py)
        controller = Controller(
            store,
            backend,
            log_dir=settings.log_dir,
            metrics=metrics,
            on_written=lambda uids: _wake_log_followers(app, uids),
            pool_profiles=settings.pool_profiles,
            workload_size=settings.workload_size,
            extensions=build_extensions(settings),
        )
        lease = Lease(store, holder_id(uuid.uuid4().hex[:8]))
        trim = EventTrim(
            store, EventLimits(settings.event_max_age_seconds, settings.event_max_count)
        )
        loop = ControllerLoop(
            controller,
            settings.tick_seconds,
            lease,
            housekeeping=trim,
            stall_seconds=settings.controller_stall_seconds,
        )

    def stop() -> None:
        if loop is not None:
            loop.stop()
        store.close()

    app = create_app(
        store,
        metrics=metrics,
        on_start=loop.start if loop else None,
        on_stop=stop,
        is_ready=loop.is_ready if loop else None,
        write_probe=WriteProbe(store, min_free_bytes=settings.store_min_free_bytes),
        max_body_bytes=settings.max_body_bytes,
        metrics_public=settings.metrics_public,
        on_write=loop.wake if loop else None,
        on_request=loop.saw_request if loop else None,
        task_exec=executor,
        task_session=opener,
    )
    reads.configure(app, reads.ReadLimits(settings.log_max_bytes, settings.log_max_followers))
    return app


def task_executor(backend: object) -> TaskExecutor | None:
    """What the API calls to run a command in a task (backends/task_exec.py), when the
    backend can."""
    found = task_exec_of(backend)
    if found is None:
        return None

    def run(request_id: str, command: Sequence[str], timeout: float) -> tuple[int, bytes] | None:
        result = found.exec_task(request_id, command, timeout)
        return None if result is None else (result.exit_code, result.output)

    return run


def session_opener(backend: object) -> SessionOpener | None:
    """What the API calls to open an interactive session in a task (backends/task_exec.py's
    ``TaskSessions``), when the backend can."""
    found = task_sessions_of(backend)
    if found is None:
        return None

    def open_session(
        request_id: str, command: Sequence[str], tty: bool, rows: int, cols: int
    ) -> Session | None:
        return found.open_session(request_id, command, tty=tty, rows=rows, cols=cols)

    return open_session


def _check_database(settings: Settings) -> None:
    """A SQLite database damaged in the middle stops the start here, in one line naming the
    file and what to do (exit 2), rather than a server that migrates, serves and is never
    ready. Bounded by ``db_check_seconds``: a bigger file is served unchecked, with a warning."""
    path = sqlite_file(settings.database_url)
    if path is None:
        return  # PostgreSQL checks its own pages
    try:
        check_sqlite_file(path, settings.db_check_seconds)
    except DamagedDatabase as err:
        _err(f"aipaas server: {err}")
        raise SystemExit(2) from err


def _wake_log_followers(app: FastAPI, job_uids: Sequence[str]) -> None:
    """The controller wrote these jobs (from its thread): the process's log watcher, if anyone
    has followed logs yet, reads them at once rather than at its next periodic read."""
    watch = getattr(app.state, "log_watch", None)  # made on the first follow (server/reads.py)
    if isinstance(watch, LogWatch):
        watch.notify(job_uids)


def kube_options(settings: Settings) -> KubeOptions:
    return KubeOptions(
        kubeconfig=str(settings.kube_config) if settings.kube_config else None,
        context=settings.kube_context,
        namespaces=settings.kube_namespaces,
        default_image=settings.kube_image,
        fencing_namespace=settings.kube_fencing_namespace,
    )


def local_options(settings: Settings) -> LocalOptions:
    """Who local tasks run as and where, from the settings (``ValueError``: a bad task_user)."""
    root = settings.task_root or default_task_root(settings.data_dir)
    isolation = TaskIsolation.for_server(root, fixed_user=settings.task_user)
    cache = DatasetCacheConfig(
        settings.dataset_cache_root,
        settings.dataset_cache_bytes,
        tuple(str(p) for p in settings.dataset_file_roots),
    )
    return {
        "isolation": isolation,
        "gpu_discovery_seconds": settings.gpu_discovery_seconds,
        "dataset_cache": cache,
        "task_logs": TaskLogLimits(
            settings.task_log_head_bytes,
            settings.task_log_tail_bytes,
            settings.task_log_min_free_bytes,
        ),
        "gpu_share_mps": settings.gpu_share_mps,
        "hami_core_library": settings.hami_core_library,
    }


def node_caches_config(settings: Settings) -> NodeCachesConfig:
    return NodeCachesConfig(
        settings.dataset_node_cache_root,
        settings.dataset_cache_bytes,
        tuple(str(p) for p in settings.dataset_file_roots),
    )


def _private_dir(path: Path) -> None:
    """The data directory (database, tokens, logs, run records): the server's user only."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 whatever was there (a new file, renamed)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as handle:  # mkstemp makes it 0600
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
