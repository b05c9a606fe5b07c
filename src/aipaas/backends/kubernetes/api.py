"""The Kubernetes API as the backend uses it: plain documents in and out, over lightkube.

Keeping lightkube's typed models behind this module leaves the rest of the backend working on
the documents the Kubernetes API speaks (what the tests compare and validate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from lightkube import ApiError, Client, KubeConfig
from lightkube.core.resource import Resource
from lightkube.resources.core_v1 import Namespace, Node, Pod, PodBinding
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimStatus,
    ResourceSlice,
)
from lightkube.types import PatchType

from aipaas.backends.kubernetes.options import KubeOptions

KINDS: Final[dict[str, type[Resource]]] = {
    "Node": Node,
    "Namespace": Namespace,
    "Pod": Pod,
    "ResourceSlice": ResourceSlice,
    "ResourceClaim": ResourceClaim,
    "DeviceClass": DeviceClass,
}
FIELD_MANAGER: Final = "aipaas"


class Conflict(Exception):
    """The object exists already, or changed since it was read (HTTP 409)."""


def make_client(options: KubeOptions) -> Client:
    """A client from the kubeconfig named in the options, else lightkube's order: in-cluster
    service account, $KUBECONFIG, ~/.kube/config."""
    config = None
    if options.kubeconfig:
        config = KubeConfig.from_file(options.kubeconfig).get(options.context)
    return Client(config, field_manager=FIELD_MANAGER, lazy=False)


class KubeApi:
    def __init__(self, client: Client) -> None:
        self.client = client

    @staticmethod
    def _doc(obj: Any) -> dict[str, Any]:
        return dict(obj.to_dict())

    def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        res: Any = KINDS[kind]
        kwargs: dict[str, Any] = {"labels": labels, "fields": fields}
        if namespace is not None or kind in ("Pod", "ResourceClaim"):
            kwargs["namespace"] = namespace if namespace is not None else "*"
        return [self._doc(o) for o in self.client.list(res, **kwargs)]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        res: Any = KINDS[kind]
        try:
            return self._doc(self.client.get(res, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    def create(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Create; ``Conflict`` when it exists already."""
        res: Any = KINDS[document["kind"]]
        try:
            return self._doc(self.client.create(res.from_dict(dict(document))))
        except ApiError as err:
            if err.status.code == 409:
                raise Conflict(err.status.message) from err
            raise

    def replace_status(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """PUT a claim's status (its resourceVersion a precondition: ``Conflict`` if stale)."""
        meta = document["metadata"]
        try:
            status: Any = ResourceClaimStatus.from_dict(dict(document))
            written = self.client.replace(
                status,
                meta["name"],
                namespace=meta["namespace"],
            )
        except ApiError as err:
            if err.status.code == 409:
                raise Conflict(err.status.message) from err
            raise
        return self._doc(written)

    def patch(
        self, kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """A JSON merge patch (a resourceVersion in it is a precondition)."""
        res: Any = KINDS[kind]
        try:
            written = self.client.patch(
                res, name, dict(patch), namespace=namespace, patch_type=PatchType.MERGE
            )
        except ApiError as err:
            if err.status.code == 409:
                raise Conflict(err.status.message) from err
            raise
        return self._doc(written)

    def delete(
        self, kind: str, name: str, namespace: str | None = None, grace: int | None = None
    ) -> None:
        """Delete (a pod: after ``grace`` seconds of SIGTERM); nothing when it is gone."""
        res: Any = KINDS[kind]
        try:
            self.client.delete(res, name, namespace=namespace, grace_period=grace)
        except ApiError as err:
            if err.status.code != 404:
                raise

    def bind(self, document: Mapping[str, Any]) -> None:
        """POST pods/binding; ``Conflict`` when the pod is bound already."""
        meta = document["metadata"]
        try:
            bound: Any = PodBinding.from_dict(dict(document))
            self.client.create(bound, meta["name"], namespace=meta["namespace"])
        except ApiError as err:
            if err.status.code == 409:
                raise Conflict(err.status.message) from err
            raise
        except msgspec.ValidationError:
            # The API server answers a binding with a Status, which lightkube decodes as a
            # Binding and refuses; the status code was a success (errors raise ApiError first).
            pass

    def log(self, name: str, namespace: str, limit_bytes: int = 8 << 20) -> str:
        text = "".join(self.client.log(name, namespace=namespace))
        return text[-limit_bytes:]

    def close(self) -> None:
        self.client.close()
