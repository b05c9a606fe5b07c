"""Where a read or a load in the simulator takes its bytes from, and the links it crosses.

A pod reads its node's cache (link ``disk``) when the bytes it reads next are there. Otherwise,
when the policy lets peers serve (a distributed cache, as Alluxio under Fluid is), it reads a
complete copy on another node over the network (``net`` of the reader, ``serve`` of the
holder); else the source (``nic``: what the object store serves one node, and ``source``: what
it serves in all). Prefetch loads take the same peer-or-source path.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Iterable, Mapping

from aipaas.data.sim_cache import SimNodeCache
from aipaas.data.sim_model import DataPlane, PodRun

Links = tuple[Hashable, ...]


def complete_copies(caches: Mapping[str, SimNodeCache]) -> dict[str, list[str]]:
    """Dataset -> the nodes holding it whole, by name."""
    out: dict[str, list[str]] = {}
    for node in sorted(caches):
        for name, entry in caches[node].entries.items():
            if entry.complete:
                out.setdefault(name, []).append(node)
    return out


def capacity(plane: DataPlane, nodes: Iterable[str]) -> dict[Hashable, float]:
    out: dict[Hashable, float] = {"source": plane.source_total_bps}
    for node in nodes:
        out[("nic", node)] = plane.source_to_node_bps
        out[("disk", node)] = plane.cache_to_task_bps
        out[("net", node)] = plane.peer_bps
        out[("serve", node)] = plane.peer_bps
    return out


def remote_links(node: str, dataset: str, copies: Mapping[str, list[str]], peers: bool) -> Links:
    """A peer holding ``dataset`` whole (spread by the reader's name), else the source."""
    holders = [h for h in copies.get(dataset, ()) if h != node] if peers else []
    if holders:
        peer = holders[zlib.crc32(node.encode()) % len(holders)]
        return (("net", node), ("serve", peer))
    return (("nic", node), "source")


def pod_links(pod: PodRun, copies: Mapping[str, list[str]], peers: bool) -> Links:
    """The links of the pod's read now; sets ``pod.path`` to "cache", "peer" or "source"."""
    entry = pod.entry
    if entry is not None:
        size = max(entry.dataset.size_bytes, 1)
        if entry.complete or pod.consumed % size < entry.bytes:
            pod.path = "cache"
            return (("disk", pod.node),)
    dataset = entry.dataset.name if entry is not None else pod.dataset
    links = remote_links(pod.node, dataset, copies, peers)
    pod.path = "peer" if links[0] == ("net", pod.node) else "source"
    return links
