"""The Python SDK: the HTTP API as methods. The CLI uses it; so can anyone.

    from aipaas.client import Client
    client = Client()                     # AIPAAS_URL, AIPAAS_TOKEN, or the config file
    client.apply(open("job.yaml").read())
    client.get("job", "hello")["status"]["phase"]

    client.wait("job", "hello", "phase=Succeeded", timeout=600)
    for change in client.watch("jobs"):   # ADDED / MODIFIED / DELETED, resumed if dropped
        print(change["type"], change["object"]["metadata"]["name"])

Errors come back as the aipaas error classes (NotFound, Forbidden, InvalidObject, ...), with the
server's message; ``wait`` adds WaitTimeout and WaitFailed (client_streams.py).

Where the URL and token come from (``Client()`` and ``Client.from_env()``, so the CLI too):
AIPAAS_URL, else the config file's ``url``, else http://127.0.0.1:8600. The token is
AIPAAS_TOKEN whenever that variable is set, even to nothing: an empty AIPAAS_TOKEN means no
token (a 401 then says so), never the config file's token, which `aipaas up` writes as the
platform admin's. Only with AIPAAS_TOKEN unset is the config file's ``token`` used.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from aipaas import client_streams
from aipaas.api.registry import KINDS, resolve_kind
from aipaas.client_streams import WaitFailed, WaitTimeout
from aipaas.errors import (
    AipaasError,
    ClientError,
    FieldError,
    InvalidObject,
    Unavailable,
    error_class,
)

DEFAULT_URL = "http://127.0.0.1:8600"
__all__ = ["Client", "WaitFailed", "WaitTimeout", "config_path"]


def config_path(environ: Mapping[str, str]) -> Path:
    if environ.get("AIPAAS_CONFIG"):
        return Path(environ["AIPAAS_CONFIG"])
    home = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(home) / "aipaas" / "config.yaml"


class Client:
    def __init__(
        self, url: str | None = None, token: str | None = None, timeout: float = 30.0
    ) -> None:
        """``url`` unset: the URL and (unless ``token`` is given) the token are read as
        ``from_env`` reads them. ``url`` given: the token is ``token`` alone (a token meant
        for the configured server is never sent to another URL)."""
        #: why no token is sent, when the environment said so (a 401's message adds it)
        self.token_note = ""
        if url is None:
            found_url, found_token, self.token_note = _from_environment(os.environ)
            url, token = found_url, token if token is not None else found_token
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url + "/api/v1", headers=headers, timeout=timeout)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Client:
        """AIPAAS_URL and AIPAAS_TOKEN win over the config file (AIPAAS_CONFIG or
        ~/.config/aipaas/config.yaml); a set but empty AIPAAS_TOKEN means no token."""
        url, token, note = _from_environment(os.environ if environ is None else environ)
        client = cls(url, token)
        client.token_note = note
        return client

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # objects ------------------------------------------------------------------------------

    def apply(self, manifest: str | bytes) -> builtins.list[dict[str, Any]]:
        """Create or update every object of a YAML/JSON text; returns what happened to each."""
        body = manifest.encode() if isinstance(manifest, str) else manifest
        answer = self._call(
            "POST", "/apply", content=body, headers={"Content-Type": "application/yaml"}
        )
        items: builtins.list[dict[str, Any]] = answer["items"]
        return items

    def get(self, kind: str, name: str, tenant: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/{_plural(kind)}/{name}", params=_t(tenant))
        return result

    def list(
        self, kind: str, tenant: str | None = None, *, page_size: int | None = None
    ) -> list[dict[str, Any]]:
        """Every object of a kind: the server's pages, their continue tokens followed."""
        return builtins.list(self.iter_list(kind, tenant, page_size=page_size))

    def iter_list(
        self, kind: str, tenant: str | None = None, *, page_size: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """``list``, a page at a time: no more than one page is held."""
        return self._pages(f"/{_plural(kind)}", _t(tenant), page_size)

    def replace(self, manifest: str | bytes) -> dict[str, Any]:
        """Update one object; its metadata.resourceVersion must be the one read (else 409)."""
        text = manifest.decode() if isinstance(manifest, bytes) else manifest
        document = yaml.safe_load(text)
        if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
            raise InvalidObject([FieldError("", "a replace takes one object")])
        path = f"/{_plural(str(document.get('kind', '')))}/{document['metadata'].get('name')}"
        result: dict[str, Any] = self._call(
            "PUT", path, content=text.encode(), headers={"Content-Type": "application/yaml"}
        )
        return result

    def delete(self, kind: str, name: str, tenant: str | None = None) -> str:
        answer = self._call("DELETE", f"/{_plural(kind)}/{name}", params=_t(tenant))
        return str(answer["message"])

    def cancel(self, name: str, tenant: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/jobs/{name}/cancel", params=_t(tenant))
        return result

    def devices(self, *, page_size: int | None = None) -> builtins.list[dict[str, Any]]:
        """Every published device: node, driver, pool, attributes, capacity, state, holders."""
        return builtins.list(self._pages("/devices", {}, page_size))

    def events(
        self,
        kind: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        *,
        page_size: int | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Events, oldest first, every page of them."""
        params = _t(tenant)
        if kind:
            params["kind"] = resolve_kind(kind)
        if name:
            params["name"] = name
        return builtins.list(self._pages("/events", params, page_size))

    def logs(
        self,
        name: str,
        *,
        task: str | None = None,
        follow: bool = False,
        tenant: str | None = None,
        tail: int | None = None,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
    ) -> Iterator[str]:
        """Lines of the job's task logs, each prefixed with its task name: the last ``tail``
        of each task, of the tasks written to in the last ``since_seconds``, at most
        ``limit_bytes`` in all (the server caps it too)."""
        params: dict[str, str] = _t(tenant)
        if task:
            params["task"] = task
        if follow:
            params["follow"] = "true"
        for key, value in (
            ("tail", tail),
            ("sinceSeconds", since_seconds),
            ("limitBytes", limit_bytes),
        ):
            if value is not None:
                params[key] = str(value)
        timeout = None if follow else self.http.timeout
        try:
            with self.http.stream(
                "GET", f"/jobs/{name}/logs", params=params, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                yield from response.iter_lines()
        except httpx.TransportError as err:
            raise Unavailable(f"cannot reach {self.url}: {err}") from err

    # streams (client_streams.py) ----------------------------------------------------------------

    def watch(
        self,
        kind: str,
        name: str | None = None,
        tenant: str | None = None,
        *,
        resource_version: str | None = None,
        timeout: float | None = None,
        bookmarks: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Changes of a kind's objects (or of one) as ``{"type": ADDED|MODIFIED|DELETED,
        "object": ...}``: first every object as ADDED (or, from a bookmark's
        ``resource_version``, what changed since), then each change as it comes, until
        ``timeout`` seconds (None: until the caller stops). Dropped connections are resumed.
        ``bookmarks``: also yield the BOOKMARK documents (after the first state, then after
        changes), whose ``object.metadata.resourceVersion`` resumes a later watch."""
        params = _t(tenant)
        if name:
            params["name"] = name
        return client_streams.watch(
            self,
            f"/watch/{_plural(kind)}",
            params,
            resource_version=resource_version,
            timeout=timeout,
            bookmarks=bookmarks,
        )

    def wait(
        self,
        kind: str,
        name: str,
        for_: client_streams.Condition = "phase=Succeeded",
        *,
        tenant: str | None = None,
        timeout: float = 60.0,
    ) -> dict[str, Any] | None:
        """Block until the object meets ``for_`` (``phase=Succeeded``, ``condition=Ready``,
        ``jsonpath={.status.phase}=Running``, ``create``, a function of the object) and return
        it, or until it is gone with ``"delete"`` (None).
        Raises WaitTimeout after ``timeout`` seconds, NotFound if it does not exist (or goes),
        WaitFailed when a job ends in another phase than the one waited for."""
        return client_streams.wait(self, kind, name, for_, tenant=tenant, timeout=timeout)

    def follow_events(
        self,
        kind: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        *,
        after: int = 0,
        timeout: float | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Events with an ``id`` above ``after`` (0: from the oldest kept), then each new one
        as it is written, until ``timeout`` seconds (None: until the caller stops)."""
        params = _t(tenant)
        if kind:
            params["kind"] = resolve_kind(kind)
        if name:
            params["name"] = name
        return client_streams.follow_events(self, params, after=after, timeout=timeout)

    def rerun(self, name: str, tenant: str | None = None) -> dict[str, Any]:
        """A new job from job ``name``'s spec (NAME-2, NAME-3, ...), annotated with the job it
        reruns (``aipaas.io/rerun-of``); the original keeps its history. The apply's answer."""
        return client_streams.rerun(self, name, tenant)

    def warm_dataset(
        self, name: str, nodes: Sequence[str] = (), tenant: str | None = None
    ) -> dict[str, Any]:
        """Ask the controller to load dataset ``name`` on ``nodes`` (none: its policy's)."""
        body = {"nodes": builtins.list(nodes)}
        answer: dict[str, Any] = self._call(
            "POST", f"/datasets/{name}/warm", params=_t(tenant), json=body
        )
        return answer

    def usage(self, tenant: str | None = None) -> builtins.list[dict[str, Any]]:
        """GPU-hours and CPU-hours by tenant, queue, user and GPU model."""
        items: builtins.list[dict[str, Any]] = self._call("GET", "/usage", params=_t(tenant))[
            "items"
        ]
        return items

    def cost(
        self,
        *,
        since: str | None = None,
        until: str | None = None,
        by: str = "tenant",
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Cost and usage in [since, until) summed by ``by`` (server/finops_routes.py)."""
        params = {"by": by, **_t(tenant)}
        params.update({k: v for k, v in (("since", since), ("until", until)) if v})
        answer: dict[str, Any] = self._call("GET", "/cost", params=params)
        return answer

    def statement(self, tenant: str, month: str | None = None, fmt: str = "json") -> Any:
        """A tenant's monthly statement: a dict (json) or the CSV text (csv)."""
        params = {"format": fmt, **({"month": month} if month else {})}
        if fmt == "csv":
            try:
                response = self.http.get(f"/statements/{tenant}", params=params)
            except httpx.TransportError as err:
                raise Unavailable(f"cannot reach {self.url}: {err}") from err
            if response.status_code >= 400:
                raise _error(response)
            return response.text
        return self._call("GET", f"/statements/{tenant}", params=params)

    def prices(self, tenant: str | None = None) -> dict[str, Any]:
        """The price lists that price a tenant's use, and the one in force now."""
        answer: dict[str, Any] = self._call("GET", "/prices", params=_t(tenant))
        return answer

    def invite(self, invitation: dict[str, Any]) -> dict[str, Any]:
        """Make an Invitation: {"invitation": ..., "token": one-time token, shown once}."""
        answer: dict[str, Any] = self._call("POST", "/invitations", json=invitation)
        return answer

    def redeem(self, token: str) -> dict[str, Any]:
        """Redeem an invitation (no bearer token needed): the new user and its token."""
        answer: dict[str, Any] = self._call("POST", "/invitations/redeem", json={"token": token})
        return answer

    # tokens -------------------------------------------------------------------------------

    def create_token(
        self,
        user: str,
        tenant: str | None = None,
        *,
        name: str | None = None,
        expires_in: str | int | None = None,
        expires_at: str | None = None,
    ) -> dict[str, Any]:
        """A new token for ``user``; the answer's ``token`` is the secret, shown only now.
        ``expires_in``: seconds or ``90s``/``30m``/``12h``/``90d``; ``expires_at``: RFC 3339."""
        body: dict[str, Any] = {"user": user}
        for key, value in (
            ("tenant", tenant),
            ("name", name),
            ("expiresIn", expires_in),
            ("expiresAt", expires_at),
        ):
            if value is not None and value != "":
                body[key] = value
        result: dict[str, Any] = self._call("POST", "/tokens", json=body)
        return result

    def list_tokens(
        self, tenant: str | None = None, *, page_size: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """The tokens the caller may see (never their secrets), every page of them."""
        return builtins.list(self._pages("/tokens", _t(tenant), page_size))

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        """Revoke a token by its id (``tok_...``); the token as it is now."""
        result: dict[str, Any] = self._call("DELETE", f"/tokens/{token_id}")
        return result

    def whoami(self) -> dict[str, str]:
        result: dict[str, str] = self._call("GET", "/whoami")
        return result

    # transport ------------------------------------------------------------------------------

    def _pages(
        self, path: str, params: dict[str, str], page_size: int | None
    ) -> Iterator[dict[str, Any]]:
        """The items of every page of a list, following ``metadata.continue``."""
        query = dict(params)
        if page_size is not None:
            query["limit"] = str(page_size)
        while True:
            answer = self._call("GET", path, params=query)
            yield from answer["items"]
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return
            query["continue"] = str(token)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise Unavailable(f"cannot reach {self.url}: {err}") from err
        if response.status_code >= 400:
            error = _error(response)
            if response.status_code == 401 and self.token_note:
                error.message = self.token_note  # the server's "no token" said with its cause
            raise error
        return response.json()


def _from_environment(env: Mapping[str, str]) -> tuple[str, str | None, str]:
    """URL, token and, when no token is sent because AIPAAS_TOKEN is set but empty, why."""
    file: dict[str, Any] = {}
    path = config_path(env)
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            where = getattr(err, "problem_mark", None)
            line = f" at line {where.line + 1}" if where is not None else ""
            problem = getattr(err, "problem", None) or getattr(err, "strerror", None) or err
            raise ClientError(f"config file {path}: {problem}{line}") from err
        file = loaded if isinstance(loaded, dict) else {}
    url = env.get("AIPAAS_URL") or file.get("url") or DEFAULT_URL
    if "AIPAAS_TOKEN" in env:  # set, even empty: the environment decides, not the file
        token = env["AIPAAS_TOKEN"].strip() or None
        note = (
            ""
            if token
            else (f"AIPAAS_TOKEN is set but empty, so no token was sent; unset it to use {path}'s")
        )
        return str(url), token, note
    found = file.get("token")
    return str(url), str(found) if found else None, ""


def _plural(kind: str) -> str:
    return KINDS[resolve_kind(kind)].plural


def _t(tenant: str | None) -> dict[str, str]:
    return {"tenant": tenant} if tenant else {}


def _error(response: httpx.Response) -> AipaasError:
    try:
        body = response.json()
    except ValueError:
        return AipaasError(f"HTTP {response.status_code}: {response.text[:200]}")
    code = str(body.get("code", ""))
    message = str(body.get("message") or body.get("detail") or f"HTTP {response.status_code}")
    if code == "Invalid":
        fields = [
            FieldError(f.get("path", ""), f.get("reason", "")) for f in body.get("fields", [])
        ]
        error: AipaasError = InvalidObject(fields, message)
    else:
        error = error_class(code)(message)
    error.http_status = response.status_code
    return error
