"""Where a tenant's webhook may be sent: resolved once, checked, and that address kept.

A tenant admin must not make the controller post into the platform's own network (loopback,
private, link-local and cloud metadata addresses). Checking the name and then letting the HTTP
client resolve it again is not enough: a name whose DNS answer changes between the two
(rebinding, a TTL of 0) passes the check with a public address and is then sent to 127.0.0.1.
So the name is resolved once, every address it resolves to must be public, and the POST
connects to the first of those checked addresses, with the URL's host kept as the Host header
and as the TLS server name (SNI, and the name the certificate is checked against).

A refusal names the host and why, never the addresses an internal name resolves to: the
tenant reads it (a delivery's ``lastError``), and the platform's internal DNS is not theirs.

Every send has a total deadline (``DEADLINE_SECONDS``: connecting, TLS, the request and the
whole answer), not only a timeout per read: a receiver that answers one byte every few seconds
never trips a per-read timeout and would hold its sender for as long as it liked. Called by
metering/webhooks.py (on the controller's delivery threads).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

import httpcore
import httpx

#: each read, write and connect (a receiver that goes quiet)
TIMEOUT_SECONDS: Final = 3.0
#: the whole send: connect, TLS, request and the complete answer
DEADLINE_SECONDS: Final = 10.0
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class NotPublic(OSError):
    """The webhook's host is not (only) a public address, or it cannot be resolved."""


def public_address(url: str) -> str:
    """The address to connect to for ``url``: its host resolved once, every address checked.
    Raises NotPublic, saying why, when any of them is not a global (public) address."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as err:
        raise NotPublic(f"cannot resolve {host}") from err
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise NotPublic(f"{host} resolves to no address")
    if not all(address.is_global for address in addresses):
        # The host as the tenant wrote it, not what it resolves to (see the module's doc).
        raise NotPublic(f"{host} is not a public address (or resolves to one that is not)")
    return str(addresses[0])


def private_target(url: str) -> str | None:
    """Why a tenant's webhook may not go to ``url``; None when every address is public."""
    try:
        public_address(url)
    except NotPublic as err:
        return str(err)
    return None


def pinned_request(url: str, address: str, body: bytes, headers: dict[str, str]) -> httpx.Request:
    """A POST of ``body`` to ``url`` that connects to ``address``: the URL's host stays the
    Host header and, for https, the TLS server name (httpcore's ``sni_hostname`` extension),
    so virtual hosts and certificate checks work as if the name had been resolved."""
    original = httpx.URL(url)
    extensions = {}
    if original.scheme == "https":
        extensions["sni_hostname"] = original.raw_host.decode("ascii")
    return httpx.Request(
        "POST",
        original.copy_with(host=address),
        content=body,
        headers={**headers, "Host": original.netloc.decode("ascii")},
        extensions=extensions,
    )


class DeadlinePassed(httpcore.TimeoutException):
    """The send's total deadline passed (httpx reports it as a timeout)."""


class _Deadline(httpcore.NetworkBackend):
    """httpcore's sockets, each connect, read and write given at most what is left of one
    total deadline (their own timeout still applies when it is shorter)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.inner = httpcore.SyncBackend()

    def left(self, timeout: float | None) -> float:
        remaining = self.ends - time.monotonic()
        if remaining <= 0:
            raise DeadlinePassed(f"no complete answer within the {self.seconds:g} s deadline")
        return remaining if timeout is None else min(timeout, remaining)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_tcp(
            host, port, self.left(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a webhook goes over TCP only")

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, max(self.ends - time.monotonic(), 0)))


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self.inner = inner
        self.deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self.deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self.deadline.left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wrapped = self.inner.start_tls(ssl_context, server_hostname, self.deadline.left(timeout))
        return _DeadlineStream(wrapped, self.deadline)

    def get_extra_info(self, info: str) -> object:
        return self.inner.get_extra_info(info)


def _client(
    verify: ssl.SSLContext | bool, deadline: float, proxy: str | None = None
) -> httpx.Client:
    """A client whose every send ends within ``deadline`` seconds: httpx's transport over a
    connection pool of httpcore's whose sockets keep the deadline (httpx has no total
    deadline of its own; its pool takes no network backend, so the pool is made here)."""
    transport = httpx.HTTPTransport(verify=verify, trust_env=False, retries=0)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
        proxy=httpcore.Proxy(proxy) if proxy else None,
        max_connections=1,
        retries=0,
        network_backend=_Deadline(deadline),
    )
    return httpx.Client(transport=transport, timeout=TIMEOUT_SECONDS, trust_env=False)


def send_pinned(
    url: str,
    address: str,
    body: bytes,
    headers: dict[str, str],
    verify: ssl.SSLContext | bool = True,
    deadline: float = DEADLINE_SECONDS,
) -> int:
    """POST to the checked ``address`` within ``deadline`` seconds; returns the status code.
    No proxy from the environment: an HTTP proxy's tunnel would present the address, not the
    host, as the TLS server name; and no redirects (a redirect would go where no check was
    made). An error names the URL's host, never the address it was pinned to."""
    request = pinned_request(url, address, body, headers)
    host = urlsplit(url).hostname or ""
    try:
        with _client(verify, deadline) as client:
            return client.send(request, follow_redirects=False).status_code
    except httpx.RequestError as err:
        if address not in str(err):
            raise
        raise type(err)(str(err).replace(address, host), request=request) from None


def send(
    url: str,
    body: bytes,
    headers: dict[str, str],
    verify: ssl.SSLContext | bool = True,
    deadline: float = DEADLINE_SECONDS,
) -> int:
    """POST to ``url`` as it resolves now (the operator's alert URL, or a tenant's where
    private targets are allowed), through the environment's proxy for its scheme, if any,
    within ``deadline`` seconds; no redirects."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    bypass = bool(urllib.request.proxy_bypass(parts.hostname or ""))  # NO_PROXY
    proxy = None if bypass else proxies.get(parts.scheme)
    with _client(verify, deadline, proxy) as client:
        answer = client.post(url, content=body, headers=headers, follow_redirects=False)
        return answer.status_code
