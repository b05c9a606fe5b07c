"""Third-party mode: each Slurm partition is one node for aipaas.

Its capacity is what its healthy nodes add up to, not what is free: Slurm decides where and when
a task runs, and holds it (pending, with its reason) while the partition is busy with work that
is not aipaas's. aipaas keeps tenants, queues and quotas against these totals. A partition with
no healthy node is left out (its tasks are given up, as on a node gone).
"""

from __future__ import annotations

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import NodeInfo
from aipaas.backends.slurm.inventory import BACKEND, LABEL_PREFIX, SlurmInventory
from aipaas.devices.topology_files import GpuShape, gpu_node_slices

PARTITION_PREFIX = "slurm-partition-"
MAX_SLICE_GPUS = 64  # a ResourceSlice's limit: a bigger partition publishes 64 GPUs


def partition_nodes(
    slurm: SlurmInventory, gpu_memory: str
) -> tuple[list[NodeInfo], list[ResourceSlice]]:
    totals: dict[str, list[int]] = {}
    models: dict[str, str] = {}
    gpu_memory_mib: dict[str, int] = {}
    for node in slurm.nodes:
        if not node.healthy:
            continue
        for partition in node.partitions:
            total = totals.setdefault(partition, [0, 0, 0])
            total[0] += node.info.cpu_milli
            total[1] += node.info.memory_mib
            total[2] += node.info.gpu_count
            if node.info.gpu_model:
                models.setdefault(partition, node.info.gpu_model)
                gpu_memory_mib.setdefault(partition, node.info.gpu_memory_mib)
    nodes: list[NodeInfo] = []
    slices: list[ResourceSlice] = []
    for partition, (cpu, memory, gpus) in sorted(totals.items()):
        name = PARTITION_PREFIX + partition.lower()
        nodes.append(
            NodeInfo(
                name=name,
                backend=BACKEND,
                cpu_milli=cpu,
                memory_mib=memory,
                gpu_count=gpus,
                gpu_model=models.get(partition, ""),
                gpu_memory_mib=gpu_memory_mib.get(partition, 0),
                labels={
                    "aipaas.dev/backend": BACKEND,
                    f"{LABEL_PREFIX}partition": partition,
                },
                annotations={f"{LABEL_PREFIX}mode": "third-party"},
            )
        )
        if gpus:
            model = models.get(partition, "GPU")
            shape = GpuShape(
                count=min(gpus, MAX_SLICE_GPUS), model=model, productName=model, memory=gpu_memory
            )
            slices.extend(gpu_node_slices(name, shape))
    return nodes, slices
