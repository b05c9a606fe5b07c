"""Settings of a server process, built once in the CLI and passed down (no import-time reads)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator


class Settings(BaseModel):
    """Everything `aipaas server` needs. Environment variables use the AIPAAS_ prefix."""

    host: str = Field(default="127.0.0.1", description="Address to listen on; loopback by default.")
    port: int = Field(default=8600, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    data_dir: Path = Field(
        default=Path(".aipaas"),
        description="SQLite database, admin token, task logs and run records live here.",
    )
    db_url: str | None = Field(
        default=None, description="Database URL (postgresql://...); SQLite in data_dir if unset."
    )
    backend: str = Field(
        default="local",
        description="Where tasks run: this machine (local), a simulated cluster (sim), both "
        "(demo), slurm, ray, kubernetes, or several side by side (local,slurm,ray).",
    )
    ray_address: str | None = Field(
        default=None,
        description="The Ray cluster (host:port of its GCS; backend ray); RAY_ADDRESS if unset.",
    )
    kube_config: Path | None = Field(
        default=None,
        description="kubeconfig of the cluster (backend kubernetes); in-cluster config, then"
        " $KUBECONFIG, then ~/.kube/config if unset.",
    )
    kube_context: str | None = Field(default=None, description="kubeconfig context to use.")
    kube_namespaces: dict[str, str] = Field(
        default_factory=dict,
        description="Namespace per tenant where it differs from the tenant's name, as"
        " 'acme=team-acme,beta=ml-beta' (backend kubernetes).",
    )
    kube_image: str = Field(
        default="python:3.12-slim",
        max_length=512,
        description="Container image of a task whose job names none (kubernetes.aipaas.dev/image).",
    )
    kube_default_queue: str = Field(
        default="default",
        max_length=63,
        description="Queue of others' pods that name none (backend kubernetes).",
    )
    kube_settle_seconds: float = Field(
        default=2.0,
        ge=0,
        le=3600,
        description="A pod group without a declared size is taken once its pods stayed the"
        " same this long (backend kubernetes).",
    )
    kube_fencing_namespace: str = Field(
        default="default",
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Namespace of the ConfigMap aipaas-fencing, which keeps the highest fencing"
        " token of the controllers' leases (backend kubernetes).",
    )
    kube_import: bool = Field(
        default=True,
        description="Schedule pods that others create with schedulerName aipaas (kubernetes).",
    )
    slurm_conf: Path | None = Field(
        default=None,
        description="The Slurm cluster's slurm.conf (backend slurm); Slurm's default if unset.",
    )
    slurm_mode: Literal["pinned", "third-party"] = Field(
        default="pinned",
        description="slurm: aipaas picks nodes (pinned) or Slurm places and queues (third-party).",
    )
    sim_cluster: Path | None = Field(
        default=None, description="YAML file of simulated nodes; two DGX-like H100 nodes if unset."
    )
    local_cpus: float | None = Field(
        default=None, gt=0, description="CPU cores this machine offers; all of them if unset."
    )
    task_root: Path | None = Field(
        default=None,
        description=(
            "Where local tasks get their working directories (one per tenant, one per task);"
            " outside the data directory. Unset: /var/lib/aipaas-tasks/<data dir>-<hash> for a"
            " root server (a path every task user can reach), '<data_dir>-tasks' otherwise."
        ),
    )
    task_user: str | None = Field(
        default=None,
        max_length=32,
        description=(
            "An existing unprivileged user every local task runs as (server as root); unset:"
            " one user per tenant, created on demand (aipaas-t-<tenant>)."
        ),
    )
    gpu_discovery_seconds: float = Field(
        default=30, gt=0, le=3600, description="How often the local backend reads NVML again."
    )
    gpu_share_mps: bool = Field(
        default=False,
        description="NVIDIA MPS runs on this machine (its operator started the control daemon):"
        " GPU shares of local tasks get MPS's thread and memory limits.",
    )
    hami_core_library: str | None = Field(
        default=None,
        max_length=1024,
        description="Path of HAMi-core's libvgpu.so on this machine: GPU shares of local tasks"
        " are held to their memory and SMs by it (when MPS is not enabled). Unset, and MPS"
        " off: a share is a scheduling promise only, and the task's status says so.",
    )
    controller: bool = Field(default=True, description="Run the controller loop in this process.")
    controller_stall_seconds: float = Field(
        default=60,
        gt=0,
        le=86400,
        description="A controller cycle running longer than this, or none finished for this"
        " long, makes /readyz answer not ready until the loop moves again.",
    )
    tick_seconds: float = Field(
        default=0.2, gt=0, le=60, description="Controller loop period; short, ticks are cheap."
    )
    bootstrap_token: str | None = Field(
        default=None, description="Platform-admin token to create on first start (automation)."
    )
    max_body_bytes: int = Field(default=1 << 20, description="Largest request body accepted.")
    metrics_public: bool = Field(
        default=False, description="Serve /metrics without a token (it names every tenant)."
    )
    log_max_bytes: int = Field(
        default=8 << 20, ge=1024, description="Most bytes of log one answer carries (limitBytes)."
    )
    log_max_followers: int = Field(
        default=256, ge=1, description="Log followers (logs -f) one process serves at once."
    )
    task_log_dir: Path | None = Field(
        default=None,
        description="Where local tasks' logs are written; unset: <data_dir>/logs. Another disk"
        " than the database's keeps a task's output off the store's room.",
    )
    task_log_head_bytes: int = Field(
        default=8 << 20, ge=0, description="A task's log keeps its first this many bytes..."
    )
    task_log_tail_bytes: int = Field(
        default=16 << 20,
        ge=2,
        description="...and a tail of at most this many of its last, rotated in two segments;"
        " the bytes between are dropped and the log says how many.",
    )
    task_log_min_free_bytes: int = Field(
        default=256 << 20,
        ge=0,
        description="Tasks' output is dropped, not written, while the log directory's disk has"
        " less than this free (above store_min_free_bytes: logs give way before the store).",
    )
    db_check_seconds: float = Field(
        default=60,
        ge=0,
        le=86400,
        description="How long the start may spend checking the SQLite database's integrity"
        " (PRAGMA quick_check; a damaged file stops the start); 0: not checked.",
    )
    store_min_free_bytes: int = Field(
        default=64 << 20,
        ge=0,
        description="Free space the SQLite database's disk must keep: below it /readyz says"
        " not ready (0: no floor).",
    )
    event_max_age_seconds: float = Field(
        default=7 * 24 * 3600, gt=0, description="Events older than this are trimmed."
    )
    event_max_count: int = Field(
        default=100_000, ge=1, description="Events beyond the newest this many are trimmed."
    )
    sim_journal_max_records: int = Field(
        default=100_000, ge=1, description="Finished simulated tasks the sim journal keeps."
    )
    sim_journal_max_age_seconds: float = Field(
        default=24 * 3600, gt=0, description="Finished simulated tasks older than this are trimmed."
    )
    budget_interval_seconds: float = Field(
        default=30, gt=0, le=3600, description="How often budgets' spend is computed again."
    )
    alert_webhook_url: str | None = Field(
        default=None,
        max_length=2048,
        description="Where platform alerts (idle GPUs, long-pending jobs, unhealthy nodes) go.",
    )
    alert_webhook_secret: str | None = Field(
        default=None, max_length=4096, description="The key platform alerts are signed with."
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="Let tenants' budget webhooks reach loopback and private addresses.",
    )
    alert_pending_seconds: float = Field(
        default=3600, gt=0, description="A job pending longer than this raises an alert."
    )
    alert_idle_gpu_seconds: float = Field(
        default=1800, gt=0, description="Allocated GPUs unused this long raise an alert."
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="API processes; each runs a controller loop but only the lease holder works.",
    )
    pool_profiles: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Scheduler profile per node pool (nodes labelled aipaas.dev/pool), as"
            " 'gpu-a=fgd,cpu=bestfit'; other nodes place with the default profile."
        ),
    )
    workload_size: int = Field(
        default=2000,
        ge=1,
        le=1_000_000,
        description="Task replicas of recent submissions that FGD-class placement learns from.",
    )
    dataset_cache_root: Path | None = Field(
        default=None,
        description="The local node's dataset cache; unset: <task root>-datasets.",
    )
    dataset_cache_bytes: int = Field(
        default=100 << 30, ge=0, description="Bytes the local dataset cache may hold."
    )
    dataset_node_cache_root: Path | None = Field(
        default=None,
        description="Slurm and Ray nodes' dataset caches, a directory per node under it (a "
        "node-local disk at the same path on every node, readable by the server); unset: "
        "<run dir>/<backend>-datasets. Each holds up to dataset_cache_bytes.",
    )
    dataset_file_roots: list[Path] = Field(
        default_factory=list,
        description="Directories file:// datasets may be read from (none unless set).",
    )

    @field_validator("dataset_file_roots", mode="before")
    @classmethod
    def _roots_from_text(cls, value: object) -> object:
        if isinstance(value, str):  # AIPAAS_DATASET_FILE_ROOTS=/data/a,/data/b
            return [part for part in value.split(",") if part.strip()]
        return value

    @field_validator("backend")
    @classmethod
    def _known_backends(cls, value: str) -> str:
        from aipaas.backends.names import check_names

        check_names(value)
        return value

    @field_validator("kube_namespaces", mode="before")
    @classmethod
    def _kube_namespaces(cls, value: object) -> object:
        if isinstance(value, str):  # from the environment: TENANT=NAMESPACE,...
            from aipaas.backends.kubernetes.options import parse_namespaces

            return parse_namespaces(value)
        return value

    @field_validator("pool_profiles", mode="before")
    @classmethod
    def _pool_profiles(cls, value: object) -> object:
        if isinstance(value, str):  # from the environment: POOL=PROFILE,...
            from aipaas.controller.workload import parse_pool_profiles

            return parse_pool_profiles(value)
        return value

    @field_validator("pool_profiles")
    @classmethod
    def _known_profiles(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            return value
        from aipaas.controller.workload import check_pool_profiles

        return check_pool_profiles(value)

    @model_validator(mode="after")
    def _tasks_outside_the_data(self) -> Settings:
        if self.task_root is not None:
            root, data = self.task_root.resolve(), self.data_dir.resolve()
            if root == data or data in root.parents or root in data.parents:
                raise ValueError(
                    f"task_root {self.task_root} must lie outside the data directory {data}"
                    " (tasks would reach the database and the tokens) and not contain it"
                )
        return self

    @model_validator(mode="after")
    def _logs_outside_the_tasks(self) -> Settings:
        if self.task_log_dir is not None and self.task_root is not None:
            logs, root = self.task_log_dir.resolve(), self.task_root.resolve()
            if logs == root or root in logs.parents:
                raise ValueError(
                    f"task_log_dir {self.task_log_dir} must lie outside task_root {root}"
                    " (tasks would read and write other tasks' logs)"
                )
        return self

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data_dir.resolve() / 'aipaas.db'}"

    @property
    def token_file(self) -> Path:
        return self.data_dir / "admin-token"

    @property
    def log_dir(self) -> Path:
        return self.task_log_dir or self.data_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"


def env_overrides(environ: Mapping[str, str]) -> dict[str, object]:
    """Settings taken from the environment: AIPAAS_BOOTSTRAP_TOKEN, AIPAAS_DB_URL, ..."""
    found: dict[str, object] = {}
    for field in Settings.model_fields:
        value = environ.get(f"AIPAAS_{field.upper()}")
        if value:
            found[field] = value
    return found


class SettingsProblem(ValueError):
    """Settings that do not validate, said in one line naming each option or variable."""


def build_settings(options: Mapping[str, object], environ: Mapping[str, str]) -> Settings:
    """The settings of `aipaas server` or `up`: the environment's (``env_overrides``), then the
    command's options over them.

    Raises:
        SettingsProblem: one line naming what was wrong where it came from (``--pool-profiles``
            or ``AIPAAS_POOL_PROFILES``) and why, instead of pydantic's report.
    """
    from_env = env_overrides(environ)
    try:
        return Settings(**{**from_env, **options})
    except ValidationError as err:
        parts = []
        for error in err.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            reason = str(error["msg"]).removeprefix("Value error, ")
            if field in options or not field:
                where = f"--{field.replace('_', '-')}" if field else ""
            else:
                where = f"AIPAAS_{field.upper()}"
            if field in from_env and field not in options:
                reason = f"{reason} (got {str(from_env[field])[:80]!r})"
            parts.append(f"{where}: {reason}" if where else reason)
        raise SettingsProblem("; ".join(" ".join(p.split()) for p in parts)) from None
