"""Where a dataset's bytes may come from and its outputs go: never the link-local range or a
cloud's instance metadata address, whose answers (credentials) would become a tenant's data.

Checking a source's URL is not enough: a redirect, a proxy, a WebHDFS namenode sending the
reader on to a "datanode", a name resolved again, or any protocol's own connections go where
no URL check looked. So the processes that read and write tenants' data (data/copier.py,
data/stage.py, data/upload.py, through ``open_source``) install ``guard_process``: a Python
audit hook on ``socket.connect`` that refuses every connection, of every library and every
hop, to a refused address, after resolution (the address actually connected to). The hook
stays for the life of the process, which reads data and nothing else; the server never
installs it.

Refused (``refusal``): 169.254.0.0/16 and fe80::/10 (link-local: AWS, GCP, Azure and others'
metadata, ECS task credentials at 169.254.170.2), fd00:ec2::254 (AWS's IPv6 metadata),
100.100.100.200 (Alibaba Cloud's), 192.0.0.192 (Oracle Cloud's), and each of them written
inside an IPv6 address (IPv4-mapped ``::ffff:169.254.169.254``, IPv4-compatible, 6to4,
Teredo, NAT64 ``64:ff9b::``). Private and loopback addresses stay allowed: a site's own object
store is a normal source. api/data.py refuses literal addresses when a Dataset is applied
(``literal_refusal``), with the old forms of IPv4 (``2852039166``, ``0xa9.0xfe.0xa9.0xfe``)
that resolvers accept.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import sys
import threading
from typing import Final

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_NETWORKS: Final = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",
        "fe80::/10",
        "fd00:ec2::254/128",
        "100.100.100.200/32",
        "192.0.0.192/32",
    )
)
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE: Final = ipaddress.ip_network("::/96")
_OLD_IPV4: Final = re.compile(r"[0-9a-fA-FxX.]+")


class DestinationRefused(PermissionError):
    """A connection to a refused address (its message says which and why)."""


def _embedded(address: Address) -> list[Address]:
    """The address and every IPv4 address written inside it."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
        low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
            found.append(low)
    return found


def refusal(address: Address) -> str | None:
    """Why ``address`` is not a dataset location; None when it may be one."""
    for inner in _embedded(address):
        if any(inner in network for network in REFUSED_NETWORKS):
            what = "link-local" if inner.is_link_local else "cloud instance metadata"
            shown = f"{address} ({inner})" if inner != address else str(address)
            return f"{shown} is a {what} address: not a dataset location"
    return None


def literal(host: str) -> Address | None:
    """The address ``host`` is written as, in any form a resolver accepts; None for a name."""
    bare = host.strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if _OLD_IPV4.fullmatch(bare) and any(c.isdigit() for c in bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def literal_refusal(host: str) -> str | None:
    """Why a host written as an address is refused (no DNS: names are checked where read)."""
    address = literal(host)
    return None if address is None else refusal(address)


def proxy_key_refusal(key: str) -> str | None:
    """Why a Secret's key may not be a storage option: a proxy (aiohttp's ``proxy``,
    WebHDFS's ``data_proxy``...) would carry the reads to an address of the tenant's choosing.
    Checked where a Dataset or an output names the Secret (server/data_checks.py) and where
    it is read (data/source.py: the Secret may change in between)."""
    if "proxy" in key.lower():
        return f"key {key}: a proxy is not allowed for a dataset source"
    return None


def check_host(host: str) -> None:
    """Refuse ``host`` (DestinationRefused) when it is, or now resolves to, a refused address.
    An early, clear answer; the connections themselves are checked by ``guard_process``."""
    address = literal(host)
    if address is not None:
        addresses = [address]
    else:
        try:
            infos = socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            return  # unresolvable: the read fails on its own
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for each in addresses:
        reason = refusal(each)
        if reason is not None:
            raise DestinationRefused(f"{host}: {reason}" if address is None else reason)


_refused: list[str] = []
_installed = threading.Lock()
_guarded = False


def refused() -> list[str]:
    """The connections this process refused, oldest first (an error names the first: a
    library may report a refused connection as "not found" or retry elsewhere)."""
    return list(_refused)


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event != "socket.connect":
        return
    destination = args[1] if len(args) > 1 else None
    if not isinstance(destination, tuple) or not destination:
        return  # a Unix socket's path: no network destination
    host = destination[0]
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return
    try:
        check_host(host)
    except DestinationRefused as err:
        message = f"connection refused by the dataset guard: {err}"
        _refused.append(message)
        raise DestinationRefused(message) from None


def guard_process() -> None:
    """Install the connection guard in this process (once; it cannot be removed)."""
    global _guarded
    with _installed:
        if not _guarded:
            sys.addaudithook(_hook)
            _guarded = True
