"""What the store remembers of an object it wrote is what parsing its row gives back, so that
readers handed the remembered object see exactly what a reader of the row would."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from aipaas.api.meta import Object
from aipaas.api.registry import load_objects
from aipaas.store import Store, tables
from aipaas.store.store import _PARSED, _parse

EXAMPLES = Path(__file__).parents[3] / "examples"
MANIFESTS = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme, labels: {team: ml}}
spec: {quota: {gpu: 8, cpu: 64, memory: 512Gi}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
spec: {weight: 2, quota: {gpu: 4}}
---
apiVersion: aipaas/v1
kind: Job
metadata:
  name: unusual
  tenant: acme
  annotations: {note: "Grüße, 東京", sim.aipaas.dev/duration: "1.5"}
spec:
  queue: research
  priority: -3
  minAvailable: 2
  tasks:
    - name: w
      replicas: 3
      command: [python3, -c, "print('é')"]
      env: {EMPTY: ""}
      resources: {cpu: 250m, memory: 1.5Gi, gpu: 0.25}
    - name: ps
      command: ["true"]
      resources: {gpu: {count: 1, model: H100}}
"""


def _row_object(store: Store, obj: Object) -> Object:
    with store.transaction(write=False) as tx:
        row = (
            tx.execute(select(tables.objects).where(tables.objects.c.uid == obj.metadata.uid))
            .mappings()
            .one()
        )
    return _parse(row)


@pytest.mark.parametrize("later", [False, True])
def test_a_created_object_is_remembered_as_its_row_parses(store: Store, later: bool) -> None:
    for obj in load_objects(MANIFESTS):
        if later:
            created = store.write_together(lambda tx, o=obj: store.create(o, conn=tx, later=True))
        else:
            created = store.create(obj)
        remembered = _PARSED[(created.metadata.uid or "", 1)]
        assert remembered == _row_object(store, created)
        assert store.get(obj.kind, obj.tenant, obj.name) == _row_object(store, created)
