"""What the store remembers of an object it wrote is what parsing its row gives back, so that
readers handed the remembered object see exactly what a reader of the row would."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import Connection, select

from aipaas.api.meta import Object
from aipaas.api.registry import load_objects
from aipaas.store import Store, tables
from aipaas.store.rows import PARSED as _PARSED
from aipaas.store.rows import parse as _parse

MANIFESTS = (Path(__file__).parents[2] / "data" / "manifests" / "unusual.yaml").read_text()


def _row_object(store: Store, obj: Object) -> Object:
    with store.transaction(write=False) as tx:
        row = (
            tx.execute(select(tables.objects).where(tables.objects.c.uid == obj.metadata.uid))
            .mappings()
            .one()
        )
    return _parse(row)


def _create_later(store: Store, obj: Object, tx: Connection) -> Object:
    return store.create(obj, conn=tx, later=True)


@pytest.mark.parametrize("later", [False, True])
def test_a_created_object_is_remembered_as_its_row_parses(store: Store, later: bool) -> None:
    for obj in load_objects(MANIFESTS):
        if later:
            created = store.write_together(partial(_create_later, store, obj))
        else:
            created = store.create(obj)
        remembered = _PARSED[(created.metadata.uid or "", 1)]
        assert remembered == _row_object(store, created)
        assert store.get(obj.kind, obj.tenant, obj.name) == _row_object(store, created)
