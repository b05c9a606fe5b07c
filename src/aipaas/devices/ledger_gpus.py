"""The device ledger's count-based GPU path: work that does not use claims (e.g. fractions
of a GPU) holds whole published GPU devices, shared among such owners, so claims never get a
GPU that such work is using. A mixin of ``DeviceLedger`` (ledger.py), whose fields it uses."""

from __future__ import annotations

from collections.abc import Iterable

from aipaas.devices.inventory import (
    ALL_NODES,
    DeviceId,
    DeviceInfo,
    InUse,
    Inventory,
    hold,
    release,
)

__all__ = ["CountGpus", "gpu_index"]


def gpu_index(device: DeviceInfo) -> int | None:
    """The GPU a device is or sits on (``index`` of a GPU, ``parentIndex`` of a MIG device),
    as the node's count-based GPU columns number them; None for other devices."""
    kind = device.short.get("type")
    value = device.short.get("parentIndex" if kind == "mig" else "index")
    if kind not in ("gpu", "mig") or isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


class CountGpus:
    """``hold_gpus`` and what it holds (the fields are ``DeviceLedger``'s)."""

    inventory: Inventory
    in_use: InUse
    _gpu_users: dict[DeviceId, list[str]]  # hold_gpus owners
    _gpus_of: dict[str, list[DeviceId]]

    def hold_gpus(self, owner: str, node: str, indices: Iterable[int]) -> str | None:
        """Hold the published GPU devices ``indices`` of ``node`` whole for count-based work
        (several such owners may share one, as GPU fractions do); the reason when a claim
        holds one. GPUs the node does not publish are left alone."""
        by_index = {
            i: d
            for d in self.inventory.by_node.get(node, [])
            if (i := gpu_index(d)) is not None and d.short.get("type") == "gpu"
        }
        taken: list[DeviceId] = []
        for index in indices:
            device = by_index.get(index)
            if device is None:
                continue
            users = self._gpu_users.get(device.id)
            if users is None:
                if not self.in_use.is_free(device.id) or not self._counters_free(device):
                    self._gpus_of[owner] = taken
                    self._release_gpus(owner)
                    return f"GPU {index} of node {node} is held by a device claim"
                hold(self.in_use, device, None)
                users = self._gpu_users[device.id] = []
            users.append(owner)
            taken.append(device.id)
        self._gpus_of.setdefault(owner, []).extend(taken)
        return None

    @staticmethod
    def gpu_on(node: str, device: DeviceInfo) -> int | None:
        """The GPU index of ``device`` when it is local to ``node`` (else None)."""
        return gpu_index(device) if device.node == node else None

    def claim_gpus(self) -> list[tuple[str, int]]:
        """(node, GPU index) of every device claims hold (a GPU once per device on it)."""
        held = self.in_use.devices | {d for d, n in self.in_use.shares.items() if n}
        out = []
        for device_id in held:
            if device_id in self._gpu_users:
                continue
            device = self.inventory.by_id.get(device_id)
            index = gpu_index(device) if device is not None else None
            if device is not None and index is not None and device.node != ALL_NODES:
                out.append((device.node, index))
        return out

    def _release_gpus(self, owner: str) -> None:
        for device_id in self._gpus_of.pop(owner, []):
            users = self._gpu_users[device_id]
            users.remove(owner)
            if not users:
                del self._gpu_users[device_id]
                release(self.in_use, self.inventory.by_id[device_id], None)

    def _counters_free(self, device: DeviceInfo) -> bool:
        for key, counters in device.consumes:
            used = self.in_use.counters.get(key, {})
            if any(used.get(name, 0) for name in counters):
                return False
        return True
