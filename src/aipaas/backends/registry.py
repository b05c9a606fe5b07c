"""Build the backend a server asks for: ``local``, ``sim`` or ``demo`` (sim + this machine),
``slurm``, ``ray``, ``kubernetes`` (a cluster aipaas schedules), or several of local, slurm and
ray side by side (``local,slurm``: one composite backend whose nodes are the members' nodes,
each labelled with its backend, ``aipaas.dev/backend``, which a job's nodeSelector may ask for).
"""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.base import Backend
from aipaas.backends.composite import CompositeBackend
from aipaas.backends.fencing import FENCING_FILE, Fenced, TokenFile
from aipaas.backends.kubernetes.options import KubeOptions
from aipaas.backends.kubernetes.registry import kube_backend
from aipaas.backends.local import LocalBackend, LocalOptions
from aipaas.backends.names import NAMES, check_names
from aipaas.backends.ray.registry import ray_backend
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.backend import DEFAULT_JOURNAL_RECORDS
from aipaas.backends.sim.cluster import load_cluster_with_slices
from aipaas.backends.sim.journal import DEFAULT_MAX_AGE_SECONDS
from aipaas.backends.slurm.registry import slurm_backend
from aipaas.clock import Clock

#: fake GPUs the demo backend's local node offers when this machine has no NVIDIA GPU
DEMO_FAKE_GPUS = 4


def make_backend(
    name: str,
    run_dir: Path,
    *,
    sim_cluster: Path | None = None,
    local_cpu_milli: int | None = None,
    clock: Clock | None = None,
    local: LocalOptions | None = None,
    sim_journal_max_records: int = DEFAULT_JOURNAL_RECORDS,
    sim_journal_max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
    slurm_conf: Path | None = None,
    slurm_mode: str = "pinned",
    ray_address: str | None = None,
    kube: KubeOptions | None = None,
) -> Backend:
    names = check_names(name)
    if len(names) > 1:
        members = [
            make_backend(
                part,
                run_dir,
                local_cpu_milli=local_cpu_milli,
                local=local,
                slurm_conf=slurm_conf,
                slurm_mode=slurm_mode,
                ray_address=ray_address,
            )
            for part in names
        ]
        return CompositeBackend(members)
    if name == "local":
        return _local(run_dir, local_cpu_milli, local)
    if name == "sim":
        return _sim(
            run_dir, sim_cluster, clock, sim_journal_max_records, sim_journal_max_age_seconds
        )
    if name == "demo":
        # Simulated nodes take only the jobs that ask for them: a real command never lands
        # on one (it would be reported as succeeded without having run). So that a job asking
        # for GPUs still runs on a machine without any, this machine then offers fake ones
        # (backends/local/fake_gpus.py), which the task's log and status name as fake.
        simulated = _sim(
            run_dir, sim_cluster, clock, sim_journal_max_records, sim_journal_max_age_seconds
        )
        demo_local: LocalOptions = {"fake_gpus": DEMO_FAKE_GPUS, **(local or {})}
        return CompositeBackend(
            [_local(run_dir, local_cpu_milli, demo_local), simulated], [simulated]
        )
    if name == "slurm":
        return slurm_backend(run_dir, slurm_conf, slurm_mode)
    if name == "ray":
        return ray_backend(run_dir, ray_address)
    if name == "kubernetes":
        return kube_backend(kube)
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(NAMES)}")


def _local(run_dir: Path, cpu_milli: int | None, options: LocalOptions | None) -> Backend:
    """The local backend, refusing starts from a controller whose lease was taken over."""
    backend = LocalBackend(run_dir, cpu_milli=cpu_milli, **(options or {}))
    return Fenced(backend, TokenFile(backend.run_dir / FENCING_FILE))


def _sim(
    run_dir: Path,
    sim_cluster: Path | None,
    clock: Clock | None,
    journal_max_records: int,
    journal_max_age_seconds: float,
) -> SimBackend:
    nodes, slices = load_cluster_with_slices(sim_cluster)
    return SimBackend(
        run_dir,
        nodes,
        clock,
        slices=slices,
        journal_max_records=journal_max_records,
        journal_max_age_seconds=journal_max_age_seconds,
    )
