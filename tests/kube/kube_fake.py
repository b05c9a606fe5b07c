"""A Kubernetes API server for tests: the real HTTP API (JSON over HTTP) for the kinds the
aipaas Kubernetes backend touches, nothing more.

No kube-apiserver, etcd or kwok can be installed on these machines, so this stands in for one.
It speaks the paths, verbs and status codes a client sees (list with label and field
selectors, get, create with generateName, replace with resourceVersion preconditions, merge and
strategic patches as a merge patch, delete with finalizers, the pods/binding, pods/log and
status subresources) and validates every object a client writes against the official
Kubernetes 1.37 schemas in strict mode (kubernetes-validate): an object the schema refuses is
answered 422 Invalid, like a real API server, and recorded in ``rejected``. What it does not
do: watch, admission plugins, defaulting beyond what tests read, garbage collection, and the
kubelet (a test plays the kubelet with ``set_pod_phase``).
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate  # type: ignore[import-untyped]
from kube_selectors import fields_match, labels_match

KUBE_VERSION = "1.37"


@dataclass(frozen=True)
class Kind:
    kind: str
    api_version: str
    namespaced: bool


KINDS: dict[tuple[str, str], Kind] = {  # (group/version, plural) -> kind
    ("v1", "nodes"): Kind("Node", "v1", False),
    ("v1", "namespaces"): Kind("Namespace", "v1", False),
    ("v1", "pods"): Kind("Pod", "v1", True),
    ("resource.k8s.io/v1", "resourceslices"): Kind("ResourceSlice", "resource.k8s.io/v1", False),
    ("resource.k8s.io/v1", "resourceclaims"): Kind("ResourceClaim", "resource.k8s.io/v1", True),
    ("resource.k8s.io/v1", "deviceclasses"): Kind("DeviceClass", "resource.k8s.io/v1", False),
}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass(frozen=True)
class Target:
    kind: Kind
    plural: str
    namespace: str | None
    name: str | None
    sub: str | None  # status, binding, log


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class FakeKube:
    """The server and its objects; ``url`` once started. Thread-safe (one lock)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name)
        self.logs: dict[tuple[str, str], str] = {}
        self.written: list[dict[str, Any]] = []  # every accepted write, validated
        self.rejected: list[tuple[dict[str, Any], str]] = []
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.grace: dict[tuple[str, str], str | None] = {}  # gracePeriodSeconds asked
        self.version = 0
        self.token = uuid.uuid4().hex
        self.lock = threading.RLock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig naming this server, with a bearer token it checks."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "aipaas", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "aipaas"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    def __enter__(self) -> FakeKube:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what a test does as the cluster (kubelet, other users) --------------------------------

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object as another client would (validated like any write)."""
        plural = _plural_of(obj["kind"])
        kind = KINDS[(obj["apiVersion"], plural)]
        namespace = obj["metadata"].get("namespace", "default") if kind.namespaced else ""
        return self.create(Target(kind, plural, namespace, None, None), obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            found = self.objects.get((_plural_of(kind), namespace, name))
            return copy.deepcopy(found) if found else None

    def list(self, kind: str) -> list[dict[str, Any]]:
        plural = _plural_of(kind)
        with self.lock:
            return [
                copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural
            ]

    def remove(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            self.objects.pop((_plural_of(kind), namespace, name), None)

    def set_pod_phase(
        self, namespace: str, name: str, phase: str, exit_code: int | None = None
    ) -> None:
        """What the kubelet reports: the phase and, once ended, the container's exit code."""
        with self.lock:
            pod = self.objects[("pods", namespace, name)]
            status: dict[str, Any] = {"phase": phase}
            container = pod["spec"]["containers"][0]["name"]
            if exit_code is not None:
                terminated = {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                }
                status["containerStatuses"] = [
                    {
                        "name": container,
                        "image": pod["spec"]["containers"][0].get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                ]
            pod["status"] = {**pod.get("status", {}), **status}
            self._bump(pod)

    # -- the API ------------------------------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def _check(self, obj: dict[str, Any]) -> None:
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            self.rejected.append((copy.deepcopy(obj), err.message))
            raise ApiError(422, "Invalid", f"{obj.get('kind')} is invalid: {err.message}") from err
        self.written.append(copy.deepcopy(obj))

    def create(self, target: Target, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            if "name" not in meta and "generateName" in meta:
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if target.kind.namespaced:
                if meta.get("namespace", target.namespace) != target.namespace:
                    raise ApiError(400, "BadRequest", "the namespace of the object does not match")
                meta["namespace"] = target.namespace
                if ("namespaces", "", target.namespace or "") not in self.objects:
                    raise ApiError(404, "NotFound", f'namespaces "{target.namespace}" not found')
            self._check(obj)
            key = (target.plural, target.namespace or "", meta.get("name", ""))
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{target.plural} "{key[2]}" already exists')
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if target.kind.kind == "Pod":
                obj["status"] = {"phase": "Pending"}
            self._bump(obj)
            self.objects[key] = obj
            return copy.deepcopy(obj)

    def find(self, target: Target) -> dict[str, Any]:
        found = self.objects.get((target.plural, target.namespace or "", target.name or ""))
        if found is None:
            raise ApiError(404, "NotFound", f'{target.plural} "{target.name}" not found')
        return found

    def listing(self, target: Target, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            items = [
                copy.deepcopy(obj)
                for (plural, ns, _), obj in sorted(self.objects.items())
                if plural == target.plural
                and (target.namespace is None or ns == target.namespace)
                and labels_match(obj, query.get("labelSelector", ""))
                and fields_match(obj, query.get("fieldSelector", ""))
            ]
            return {
                "kind": f"{target.kind.kind}List",
                "apiVersion": target.kind.api_version,
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            }

    def update(self, target: Target, new: dict[str, Any]) -> dict[str, Any]:
        """Replace an object (or only its status, for the status subresource) under the
        resourceVersion precondition the body carries."""
        with self.lock:
            current = self.find(target)
            wanted = new.get("metadata", {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    "the object has been modified; apply your changes to the latest version",
                )
            if target.sub == "status":
                merged = {**copy.deepcopy(current), "status": new.get("status", {})}
            else:
                merged = copy.deepcopy(new)
                merged["metadata"] = {
                    **merged.get("metadata", {}),
                    **{
                        k: current["metadata"][k]
                        for k in ("uid", "creationTimestamp", "namespace")
                        if k in current["metadata"]
                    },
                }
                if "status" in current:
                    merged["status"] = current["status"]
            self._check(merged)
            self._bump(merged)
            self.objects[(target.plural, target.namespace or "", target.name or "")] = merged
            self._finish_delete(target, merged)
            return copy.deepcopy(merged)

    def patch(self, target: Target, patch: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            current = self.find(target)
            if target.sub == "status":
                patch = {
                    "status": patch.get("status"),
                    "metadata": {
                        k: v for k, v in patch.get("metadata", {}).items() if k == "resourceVersion"
                    },
                }
            merged = merge_patch(current, patch)
            return self.update(target, merged)

    def delete(self, target: Target) -> dict[str, Any]:
        with self.lock:
            current = self.find(target)
            if current["metadata"].get("finalizers"):
                current["metadata"].setdefault(
                    "deletionTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                )
                self._bump(current)
                return copy.deepcopy(current)
            del self.objects[(target.plural, target.namespace or "", target.name or "")]
            return copy.deepcopy(current)

    def _finish_delete(self, target: Target, obj: dict[str, Any]) -> None:
        """An object being deleted goes once its last finalizer is removed."""
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[(target.plural, target.namespace or "", target.name or "")]

    def bind(self, target: Target, binding: dict[str, Any]) -> dict[str, Any]:
        """pods/binding: sets spec.nodeName once, as the API server's binding storage does."""
        with self.lock:
            self._check(binding)
            pod = self.find(target)
            if pod["spec"].get("nodeName"):
                raise ApiError(
                    409,
                    "Conflict",
                    f'pod {target.name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                )
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(409, "Conflict", f"pod {target.name} is being deleted")
            pod["spec"]["nodeName"] = binding["target"]["name"]
            pod.setdefault("status", {})["conditions"] = [
                {"type": "PodScheduled", "status": "True"}
            ]
            self._bump(pod)
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }


def _plural_of(kind: str) -> str:
    for (_, plural), known in KINDS.items():
        if known.kind == kind:
            return plural
    raise KeyError(kind)


def parse_path(path: str) -> Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group_version, rest = "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or (group_version, rest[0]) not in KINDS:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    kind = KINDS[(group_version, rest[0])]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return Target(kind, rest[0], namespace, name, sub)


def _handler(fake: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:  # quiet: the test output is the log
            pass

        def _answer(self, code: int, body: Any, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            data = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "the body must be a JSON object")
            return data

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            fake.requests.append((method, url.path))
            try:
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                target = parse_path(url.path)
                code, answer = 200, self._route(method, target, query)
                if method == "POST":
                    code = 201
                if isinstance(answer, str):
                    self._answer(code, answer, "text/plain")
                else:
                    self._answer(code, answer)
            except ApiError as err:
                self._answer(err.code, err.status())

        def _route(
            self, method: str, target: Target, query: dict[str, str]
        ) -> dict[str, Any] | str:
            if method == "GET" and target.name is None:
                if query.get("watch") in ("true", "1"):
                    raise ApiError(405, "MethodNotAllowed", "watch is not served by this fake")
                return fake.listing(target, query)
            if method == "GET" and target.sub == "log":
                with fake.lock:
                    fake.find(target)
                    return fake.logs.get((target.namespace or "", target.name or ""), "")
            if method == "GET":
                with fake.lock:
                    return copy.deepcopy(fake.find(target))
            if method == "POST" and target.sub == "binding":
                return fake.bind(target, self._body())
            if method == "POST" and target.name is None:
                return fake.create(target, self._body())
            if method == "PUT":
                return fake.update(target, self._body())
            if method == "PATCH":
                kind = self.headers.get("Content-Type", "")
                if "json-patch" in kind or "apply-patch" in kind:
                    raise ApiError(
                        415, "UnsupportedMediaType", f"{kind} is not served by this fake"
                    )
                return fake.patch(target, self._body())
            if method == "DELETE" and target.name is not None:
                fake.grace[(target.namespace or "", target.name)] = query.get("gracePeriodSeconds")
                return fake.delete(target)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


def iter_written(fake: FakeKube, kind: str) -> Iterator[dict[str, Any]]:
    return (obj for obj in fake.written if obj.get("kind") == kind)
