"""Where a tenant's webhook may be sent: resolved once, checked, and that address kept.

A tenant admin must not make the controller post into the platform's own network (loopback,
private, link-local and cloud metadata addresses). Checking the name and then letting the HTTP
client resolve it again is not enough: a name whose DNS answer changes between the two
(rebinding, a TTL of 0) passes the check with a public address and is then sent to 127.0.0.1.
So the name is resolved once, every address it resolves to must be public, and the POST
connects to the first of those checked addresses, with the URL's host kept as the Host header
and as the TLS server name (SNI, and the name the certificate is checked against).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from typing import Final
from urllib.parse import urlsplit

import httpx

TIMEOUT_SECONDS: Final = 3.0
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
        raise NotPublic(f"cannot resolve {host}: {err}") from err
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise NotPublic(f"{host} resolves to no address")
    for address in addresses:
        if not address.is_global:
            raise NotPublic(f"{host} resolves to {address}, not a public address")
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


def send_pinned(
    url: str,
    address: str,
    body: bytes,
    headers: dict[str, str],
    verify: ssl.SSLContext | bool = True,
) -> int:
    """POST to the checked ``address``; returns the status code. No proxy from the
    environment: an HTTP proxy's tunnel would present the address, not the host, as the TLS
    server name; and no redirects (a redirect would go where no check was made)."""
    request = pinned_request(url, address, body, headers)
    with httpx.Client(verify=verify, timeout=TIMEOUT_SECONDS, trust_env=False) as client:
        return client.send(request, follow_redirects=False).status_code
