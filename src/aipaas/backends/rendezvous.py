"""The rendezvous endpoint of an elastic job, in the names torchrun reads.

An elastic job (minAvailable below its replicas) gets, in every task's environment
(controller/launch.py): ``AIPAAS_RDZV_ENDPOINT`` and torchrun's own ``PET_RDZV_ENDPOINT``
(``HOST:PORT``), ``PET_RDZV_BACKEND=c10d``, ``PET_RDZV_ID`` (the job's uid), ``PET_NNODES``
(``MIN:MAX``, the job's minAvailable and replicas), ``PET_MAX_RESTARTS``,
``PET_RDZV_CONF=is_host=1`` for rank 0 and ``0`` for the others (a job's own conf keeps its
options and gets ``is_host`` added) and ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (why:
``variables``); torchrun takes
every ``PET_<OPTION>`` for its ``--<option>`` when the command line does not give it (as
Kubeflow's PyTorchJob sets them for its elastic jobs). The endpoint is rank 0's address and
the job's MASTER_PORT: the first task's node, a port chosen free there once per job (the local
backend) and kept, so every member, present or later, reads the same while the job's size
changes. torchrun's c10d rendezvous hosts its store there on rank 0's agent, which an elastic
job's shrink never takes away (the newest extra goes first).

A backend that moves MASTER_ADDR (Slurm, Ray: a node's address, not its name) or MASTER_PORT
(local: a port free on the machine) calls ``follow_master`` afterwards, so that the endpoint
names the same place. Pure; who calls it: controller/launch.py and the backends' starts.
"""

from __future__ import annotations

from collections.abc import MutableMapping

#: the variables that name the endpoint as ``HOST:PORT``
ENDPOINT_VARIABLES = ("AIPAAS_RDZV_ENDPOINT", "PET_RDZV_ENDPOINT")
#: how often torchrun may restart its workers: each shrink of the job costs one (the workers of
#: the tasks that stay fail with their peer gone), a growth none
MAX_RESTARTS = 100


def variables(
    master_addr: str, master_port: int, job_uid: str, low: int, high: int, *, host: bool
) -> dict[str, str]:
    """The rendezvous variables of an elastic job of ``low`` to ``high`` tasks, for a task that
    hosts the store (``host``: rank 0's) or not."""
    endpoint = f"{master_addr}:{master_port}"
    return {
        "AIPAAS_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ID": job_uid,
        "PET_NNODES": f"{low}:{high}",
        "PET_MAX_RESTARTS": str(MAX_RESTARTS),
        # torchrun's agents otherwise share the first round's store with their workers, and
        # members that joined a later round waited for keys that were never written again
        # (torch 2.13: a job grown from 1 to 3 never trained at 3)
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        # who hosts the store is said, not guessed: torchrun's guess (the endpoint's host is one
        # of this machine's names) failed on Ray, where no agent took a node's address for its
        # own and every one waited for a store nobody started
        "PET_RDZV_CONF": f"is_host={int(host)}",
    }


def with_conf(given: str, host: bool) -> str:
    """A job's own ``PET_RDZV_CONF`` with ``is_host`` added unless it says it."""
    if "is_host=" in given:
        return given
    return f"{given},is_host={int(host)}" if given else f"is_host={int(host)}"


def follow_master(env: MutableMapping[str, str]) -> None:
    """Point the endpoint variables at MASTER_ADDR:MASTER_PORT as ``env`` now has them (a job
    without an endpoint is left as it is)."""
    if "AIPAAS_RDZV_ENDPOINT" not in env:
        return
    endpoint = f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
    for name in ENDPOINT_VARIABLES:
        if name in env:
            env[name] = endpoint
