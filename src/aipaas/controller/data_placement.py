"""Placement with data (issue 13): the cycle's view of which node caches hold which job's
datasets, for the DataAffinity score (scheduler/plugins/data_affinity.py).

Only a cycle with a placeable job that names datasets builds a view; the Placer then scores
with its profile plus DataAffinity (data/affinity_profile.py). Cycles without such jobs place
exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable

from aipaas.api.data import Dataset
from aipaas.api.job import Job
from aipaas.data.affinity import DataView
from aipaas.data.affinity_api import data_view
from aipaas.store import Store


def data_view_for(store: Store, jobs: Iterable[Job]) -> DataView | None:
    """The cached bytes per node of the datasets the given jobs read (each job's own tenant's
    datasets only); None when none of them names a dataset."""
    readers = [job for job in jobs if job.spec.datasets]
    if not readers:
        return None
    tenants = {job.tenant for job in readers}
    datasets = [
        d
        for d in store.list_objects("Dataset", None)
        if isinstance(d, Dataset) and d.tenant in tenants
    ]
    return data_view(datasets, readers)
