"""The Kubernetes API as the backend uses it: plain JSON documents in and out over HTTP.

lightkube reads the kubeconfig (certificates, tokens, exec plugins, in-cluster service account)
and builds the HTTP client (httpx2, the HTTP library lightkube uses); the requests themselves
are made here, on the REST paths of each kind, so that any kind works the same way (custom
resources such as PodGroups included), lists and watches keep the resourceVersion the
informers need, and no typed model sits between the cluster's documents and the backend (what
the tests compare). Used by the backend, its informers (informer.py), the fake DRA driver and
the side-by-side benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx2
from lightkube import KubeConfig
from lightkube.config.client_adapter import Client as adapter_client
from lightkube.config.client_adapter import ConnectionParams

from aipaas.backends.kubernetes.options import KubeOptions

FIELD_MANAGER: Final = "aipaas"


@dataclass(frozen=True)
class Kind:
    """Where a kind lives: its API prefix (``/api/v1``, ``/apis/GROUP/VERSION``), its plural
    and whether it is namespaced."""

    api_version: str
    plural: str
    namespaced: bool

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


KINDS: Final[dict[str, Kind]] = {
    "Node": Kind("v1", "nodes", False),
    "Namespace": Kind("v1", "namespaces", False),
    "Pod": Kind("v1", "pods", True),
    "Service": Kind("v1", "services", True),
    "ConfigMap": Kind("v1", "configmaps", True),
    "ServiceAccount": Kind("v1", "serviceaccounts", True),
    "PodTemplate": Kind("v1", "podtemplates", True),
    "ResourceSlice": Kind("resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": Kind("resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": Kind("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "DeviceClass": Kind("resource.k8s.io/v1", "deviceclasses", False),
    "Event": Kind("events.k8s.io/v1", "events", True),
    "CoreEvent": Kind("v1", "events", True),
    "CustomResourceDefinition": Kind("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ClusterRole": Kind("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": Kind("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    # gangs: Volcano's, KAI-Scheduler's and the scheduler-plugins' (coscheduling) PodGroups
    "PodGroup.scheduling.volcano.sh": Kind("scheduling.volcano.sh/v1beta1", "podgroups", True),
    "PodGroup.scheduling.run.ai": Kind("scheduling.run.ai/v2alpha2", "podgroups", True),
    "PodGroup.scheduling.x-k8s.io": Kind("scheduling.x-k8s.io/v1alpha1", "podgroups", True),
}


class ApiError(Exception):
    """The server refused a request: its HTTP status code, reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message


class Conflict(ApiError):
    """The object exists already, or changed since it was read (HTTP 409)."""


class Gone(ApiError):
    """A watch's resourceVersion is older than the server keeps (HTTP 410): list again."""


def _raise_for(response: httpx2.Response) -> None:
    if response.is_success:
        return
    try:
        status = response.json()
    except ValueError:
        status = {}
    reason = str(status.get("reason") or response.reason_phrase)
    message = str(status.get("message") or response.text[:500])
    kind = {409: Conflict, 410: Gone}.get(response.status_code, ApiError)
    raise kind(response.status_code, reason, message)


def encode(body: object) -> bytes:
    """A request body as compact JSON, as Go clients send it. The API server keeps an opaque
    device configuration's ``parameters`` (a RawExtension) as the bytes it was sent and, on
    any later update of the object, compares them with the object encoded again, compactly:
    parameters sent with json.dumps's default ", " and ": " made every later patch of the
    claim (the DRA finalizer among them) fail with "spec: field is immutable". Go's encoder
    also escapes <, >, & and U+2028/2029 and leaves other non-ASCII text as UTF-8."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_GO_ESCAPES).encode()


#: what Go's encoding/json escapes in strings beyond JSON's own (these appear only in strings)
_GO_ESCAPES: Final = str.maketrans(
    {c: f"\\u{ord(c):04x}" for c in ("<", ">", "&", "\u2028", "\u2029")}
)


def make_client(options: KubeOptions) -> httpx2.Client:
    """An HTTP client for the kubeconfig named in the options, else lightkube's order:
    in-cluster service account, $KUBECONFIG, ~/.kube/config."""
    if options.kubeconfig:
        config = KubeConfig.from_file(options.kubeconfig).get(options.context)
    else:
        config = KubeConfig.from_env().get()
    if config is None:
        raise ValueError("the kubeconfig names no context to use")
    return adapter_client(config, ConnectionParams(timeout=httpx2.Timeout(30)))


def path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a kind's collection (all namespaces when ``namespace`` is None), or of
    one object."""
    found = KINDS[kind]
    out = found.prefix
    if found.namespaced and namespace is not None:
        out += f"/namespaces/{namespace}"
    out += f"/{found.plural}"
    return f"{out}/{name}" if name is not None else out


def _selector(pairs: Mapping[str, str] | None) -> str | None:
    return ",".join(f"{k}={v}" for k, v in pairs.items()) if pairs else None


class KubeApi:
    def __init__(
        self, http: httpx2.Client, connect: Callable[[], httpx2.Client] | None = None
    ) -> None:
        self.http = http
        self._connect = connect

    @classmethod
    def connect(cls, options: KubeOptions) -> KubeApi:
        """A client for the options' cluster that can make more of itself (``fork``)."""
        return cls(make_client(options), lambda: make_client(options))

    def fork(self) -> KubeApi:
        """A client of its own for a thread that holds a connection long (a watch, the event
        writer): an HTTP client's connections are not shared between threads reading TLS."""
        if self._connect is None:
            return self
        return KubeApi(self._connect(), self._connect)

    def _send(
        self,
        method: str,
        url: str,
        *,
        body: object = None,
        params: Mapping[str, str | int | None] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Content-Type": content_type} if body is not None else None
        content = encode(body) if body is not None else None
        query: dict[str, str | int] = {k: v for k, v in (params or {}).items() if v is not None}
        response = self.http.request(method, url, content=content, headers=headers, params=query)
        _raise_for(response)
        return response.json() if response.content else None

    def list_with_version(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """The objects and the list's resourceVersion (where a watch starts from), read in
        pages of 500 as client-go's reflector does."""
        items: list[dict[str, Any]] = []
        params: dict[str, str | int | None] = {
            "labelSelector": _selector(labels),
            "fieldSelector": _selector(fields),
            "limit": 500,
        }
        found = KINDS[kind]
        version = ""
        while True:
            answer = self._send("GET", path(kind, namespace), params=params)
            for item in answer.get("items") or []:
                # a list's items carry no kind: set it, as a get's answer has it
                item.setdefault("kind", kind.split(".")[0] if kind != "CoreEvent" else "Event")
                item.setdefault("apiVersion", found.api_version)
                items.append(item)
            meta = answer.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            if not meta.get("continue"):
                return items, version
            params["continue"] = str(meta["continue"])

    def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        return self.list_with_version(kind, namespace=namespace, labels=labels, fields=fields)[0]

    def watch(
        self,
        kind: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The events after ``resource_version`` ({type, object}), bookmarks included, until
        the server ends the watch (after about ``timeout_seconds``); ``Gone`` when that
        version is too old (the caller lists again)."""
        params: dict[str, str | int | None] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            "labelSelector": _selector(labels),
            "fieldSelector": _selector(fields),
        }
        query: dict[str, str | int] = {k: v for k, v in params.items() if v is not None}
        timeout = httpx2.Timeout(30, read=timeout_seconds + 30)
        with self.http.stream("GET", path(kind), params=query, timeout=timeout) as response:
            if not response.is_success:
                response.read()
                _raise_for(response)
            for line in response.iter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = int(status.get("code") or 500)
                    kind_of = Gone if code == 410 else ApiError
                    raise kind_of(code, str(status.get("reason")), str(status.get("message")))
                yield event

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._send("GET", path(kind, namespace, name))
        except ApiError as err:
            if err.code == 404:
                return None
            raise
        return found

    def create(self, document: Mapping[str, Any], kind: str | None = None) -> dict[str, Any]:
        """Create; ``Conflict`` when it exists already. ``kind`` names a kind whose name is
        ambiguous (``PodGroup.scheduling.volcano.sh``)."""
        namespace = (document.get("metadata") or {}).get("namespace")
        url = path(kind or document["kind"], namespace)
        created: dict[str, Any] = self._send(
            "POST", url, body=document, params={"fieldManager": FIELD_MANAGER}
        )
        return created

    def replace_status(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """PUT an object's status (its resourceVersion a precondition: ``Conflict`` if
        stale)."""
        meta = document["metadata"]
        url = path(document["kind"], meta.get("namespace"), meta["name"]) + "/status"
        written: dict[str, Any] = self._send(
            "PUT", url, body=document, params={"fieldManager": FIELD_MANAGER}
        )
        return written

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """A JSON merge patch (a resourceVersion in it is a precondition)."""
        url = path(kind, namespace, name) + (f"/{subresource}" if subresource else "")
        written: dict[str, Any] = self._send(
            "PATCH",
            url,
            body=patch,
            params={"fieldManager": FIELD_MANAGER},
            content_type="application/merge-patch+json",
        )
        return written

    def delete(
        self, kind: str, name: str, namespace: str | None = None, grace: int | None = None
    ) -> None:
        """Delete (a pod: after ``grace`` seconds of SIGTERM); nothing when it is gone."""
        try:
            self._send("DELETE", path(kind, namespace, name), params={"gracePeriodSeconds": grace})
        except ApiError as err:
            if err.code != 404:
                raise

    def bind(self, document: Mapping[str, Any]) -> None:
        """POST pods/binding; ``Conflict`` when the pod is bound already."""
        meta = document["metadata"]
        url = path("Pod", meta["namespace"], meta["name"]) + "/binding"
        self._send("POST", url, body=document)

    def log(self, name: str, namespace: str, limit_bytes: int = 8 << 20) -> str:
        url = path("Pod", namespace, name) + "/log"
        response = self.http.get(url)
        _raise_for(response)
        return response.text[-limit_bytes:]

    def version(self) -> dict[str, Any]:
        found: dict[str, Any] = self._send("GET", "/version")
        return found

    def close(self) -> None:
        self.http.close()
