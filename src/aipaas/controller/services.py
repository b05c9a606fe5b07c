"""The services' step of the controller cycle (a CycleExtension): for each Service, read its
replicas' jobs and health, decide the replica count from the measured load
(autoscale/replicas.py), start and stop replicas for that count and for rolling updates
(autoscale/service_rollout.py), and write the service's status (its ready endpoints are what
the entry point balances over).

Scaling decisions that change the count are events with their numbers (reason ``Scaled``).
A replica whose job ended, or whose liveness probe failed, is replaced (restartPolicy Always
at the level of the service); a replica's job without its service is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import random
from datetime import datetime

from aipaas.api.job import Job
from aipaas.api.service import SERVICE_LABEL, Service, ServiceLoad, ServiceStatus
from aipaas.autoscale.replicas import Load
from aipaas.controller.extensions import CycleContext
from aipaas.controller.services_metrics import gauges
from aipaas.controller.services_probe import Prober
from aipaas.controller.services_reconcile import Reconciler, ServiceMemory
from aipaas.controller.services_replicas import adopt_replicas, node_addresses, stop_replica
from aipaas.errors import NotFound
from aipaas.settings import Settings
from aipaas.store.lease import LeaseLost

log = logging.getLogger("aipaas.controller")
FINISHED = ["Succeeded", "Failed", "Cancelled"]
#: a sample older than this is from an entry point that stopped measuring (nothing in flight)
LOAD_FRESH_SECONDS = 3.0
#: stray replica jobs and loads of deleted services are looked for every this many cycles
SCAN_CYCLES = 25


class ServiceExtension:
    name = "services"

    def __init__(self, *, seed: int | None = None) -> None:
        self.prober = Prober()
        self.memories: dict[str, ServiceMemory] = {}
        self.rng = random.Random(seed)
        self.names: set[tuple[str, str]] | None = None  # the services of the last run

    def run(self, context: CycleContext) -> None:
        store = context.store
        services = [s for s in store.list_objects("Service", None) if isinstance(s, Service)]
        names = {(s.tenant, s.name) for s in services}
        # Replica jobs (strays to adopt, replicas of deleted services) and the loads of
        # deleted services are looked for when the set of services changed, else now and then.
        scan = names != self.names or context.cycle % SCAN_CYCLES == 0
        metrics = gauges(context.metrics.registry)
        for tenant, name in (self.names or set()) - names:
            metrics.gone(tenant, name)
        self.names = names
        owned = self._replica_jobs(context, names) if scan else {}
        loads: dict[tuple[str, str], ServiceLoad] = {}
        if scan or any(s.spec.autoscaling is not None for s in services):
            loads = {
                (load.tenant, load.name): load
                for load in store.list_objects("ServiceLoad", None)
                if isinstance(load, ServiceLoad)
            }
        if scan:
            for key in set(loads) - names:
                with contextlib.suppress(NotFound):
                    store.delete("ServiceLoad", *key)  # the load of a deleted service
        if not services:
            return
        wall = context.clock.now()
        taken = {
            record.port
            for service in services
            if service.status is not None
            for record in service.status.replica_jobs
        }
        reconciler = Reconciler(
            context,
            self.prober,
            addresses=node_addresses((n.name, n.backend) for n in context.nodes),
            taken_ports=taken,
            rng=self.rng,
        )
        for service in services:
            uid = service.metadata.uid or service.name
            memory = self.memories.setdefault(uid, ServiceMemory())
            load = measured(loads.get((service.tenant, service.name)), wall)
            try:
                jobs = owned.get((service.tenant, service.name), [])
                service = adopt_replicas(store, service, jobs, taken)
                desired, ready = reconciler.reconcile(service, memory, load, wall)
                metrics.set(service.tenant, service.name, desired, ready, load)
            except LeaseLost:
                raise
            except Exception:
                log.exception("service %s/%s: reconcile failed", service.tenant, service.name)
        known = {s.metadata.uid or s.name for s in services}
        for uid in set(self.memories) - known:
            del self.memories[uid]

    def _replica_jobs(
        self, context: CycleContext, services: set[tuple[str, str]]
    ) -> dict[tuple[str, str], list[Job]]:
        """The unfinished replica jobs by service; those whose service is gone (deleted) are
        stopped and deleted."""
        owned: dict[tuple[str, str], list[Job]] = {}
        for job in context.store.list_objects("Job", None, exclude_phases=FINISHED):
            owner = job.metadata.labels.get(SERVICE_LABEL)
            if owner is None or not isinstance(job, Job):
                continue
            if (job.tenant, owner) in services:
                owned.setdefault((job.tenant, owner), []).append(job)
            else:
                stop_replica(context.store, job.tenant, job.name, f"service {owner} was deleted")
        return owned


def measured(load: ServiceLoad | None, wall: datetime) -> Load | None:
    """The load the entry points measured lately, added up over the server processes."""
    now = wall.timestamp()
    if load is None or load.status is None:
        return Load(now, 0.0, 0.0)
    fresh = [s for s in load.status.samples.values() if s.at >= now - LOAD_FRESH_SECONDS]
    return Load(
        now,
        sum(s.concurrency for s in fresh),
        sum(s.rate for s in fresh),
        waiting=sum(s.waiting for s in fresh),
        in_flight=sum(s.in_flight for s in fresh),
    )


def status_of(service: Service) -> ServiceStatus:
    return service.status if service.status is not None else ServiceStatus()


def build(settings: Settings) -> ServiceExtension | None:
    """The factory of controller/extension_set.py: every server runs the services' step."""
    del settings
    return ServiceExtension()
