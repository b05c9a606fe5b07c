"""The rules of the data kinds when the API writes and shows them: a Secret's values are never
shown and the mark a read shows stands for the stored value; a Dataset's credentials must be a
Secret of its tenant (server/data_checks.py holds the checks).

Registered in server/strategies/__init__.py; called by ObjectService (server/service.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from aipaas.api.data import Dataset, Secret
from aipaas.api.meta import Object
from aipaas.server.data_checks import check_dataset_secret, dataset_keys, keep_shown_values
from aipaas.server.strategies.base import KindStrategy, Writer, check_tenant_exists
from aipaas.store.store import ObjectKey


class SecretStrategy(KindStrategy[Secret]):
    def keep_hidden(self, wanted: Secret, current: Object | None) -> Secret:
        return keep_shown_values(wanted, current)

    def unchanged(self, current: Secret, wanted: Secret) -> bool:
        # Written again even when nothing changed: "unchanged" (or an unmoved
        # resourceVersion, or no Updated event) would tell a writer who may not read the
        # values that a guessed value is the stored one.
        return False

    def shown(self, obj: Secret) -> Secret:
        """Its keys but never its values (to anyone; the controller reads them from the
        store)."""
        return obj.redacted()


class DatasetStrategy(KindStrategy[Dataset]):
    def reference_keys(self, obj: Dataset) -> list[ObjectKey]:
        return dataset_keys(obj)

    def check_references(
        self, obj: Dataset, found: Mapping[ObjectKey, Object], writer: Writer
    ) -> None:
        check_dataset_secret(obj, found)
        check_tenant_exists(obj, found)
