"""What goes into a scheduling decision and what comes out: pure data, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aipaas.api.devices import ResourceClaim
    from aipaas.devices.allocator import NodeAllocation

MILLI_PER_GPU = 1000

#: (key, operator, values) of a node selector requirement (Kubernetes' operators)
Requirement = tuple[str, str, tuple[str, ...]]
#: requirements that must all match: (label requirements, ``metadata.name`` requirements)
Term = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint: NoSchedule and NoExecute keep pods that do not tolerate it off the node
    (NoExecute also ends those running there); PreferNoSchedule only steers away."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
    #: when a NoExecute taint appeared (Kubernetes' timeAdded), on the caller's clock; None:
    #: at the session's now. Not part of what the taint matches or refuses.
    since: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes' toleration: operator Exists (no key: every taint) or Equal; effect "" for
    every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    #: tolerationSeconds: how long a running pod stays after a NoExecute taint it tolerates
    #: appears (None: for ever; 0 or less: not at all)
    seconds: int | None = None


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """Where a pod may go besides its resources (a job's nodeSelector, node affinity and
    tolerations). Hashable: masks over the nodes are computed once per distinct value."""

    selector: tuple[tuple[str, str], ...] = ()
    #: node affinity required terms: any one must match (empty: no constraint)
    required: tuple[Term, ...] = ()
    #: node affinity preferred terms with their weights
    preferred: tuple[tuple[int, Term], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A share of each of ``gpu_count`` GPUs, as HAMi asks for one: memory (MiB, or a percent
    of each GPU's memory; neither: all of it) and compute (the pod's ``gpu_milli``: cores x 10,
    at least 1 so that a shared GPU is never taken whole), optionally on GPUs named by UUID or
    index."""

    memory_mib: int = 0
    memory_percent: int = 0
    uuids: tuple[str, ...] = ()
    indices: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One schedulable unit (a task replica): CPU, memory and GPUs it needs on a single node.

    ``gpu_milli`` is per GPU: 1000 asks for whole GPUs; less than 1000 with ``gpu_count`` 1 asks
    for a share of one GPU. ``gpu_models`` lists the acceptable GPU models (empty: any).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    #: DRA claims the pod needs on its node (devices chosen by the allocator, not by count).
    claims: tuple[ResourceClaim, ...] = ()
    #: node selector, node affinity and tolerations (None: any node its resources fit)
    constraints: NodeConstraints | None = None
    #: a share of each GPU by memory and cores (None: whole GPUs, or a fraction by milli)
    share: GpuShare | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.cpu_milli < 0:
            problems.append(f"cpu_milli: must be >= 0, got {self.cpu_milli}")
        if self.memory_mib < 0:
            problems.append(f"memory_mib: must be >= 0, got {self.memory_mib}")
        if self.gpu_count < 0:
            problems.append(f"gpu_count: must be >= 0, got {self.gpu_count}")
        if not 0 <= self.gpu_milli <= MILLI_PER_GPU:
            problems.append(f"gpu_milli: must be within 0..1000, got {self.gpu_milli}")
        if self.gpu_count > 1 and self.gpu_milli != MILLI_PER_GPU and self.share is None:
            problems.append("gpu_milli: a pod asking for several GPUs must take them whole (1000)")
        if self.share is not None and self.gpu_count < 1:
            problems.append("gpu_count: a GPU share needs at least one GPU")
        if self.gpu_count > 0 and self.gpu_milli == 0:
            problems.append("gpu_milli: a GPU request needs a share above 0")
        if problems:
            raise ValueError(f"pod {self.name!r}: " + "; ".join(problems))

    @property
    def is_shared(self) -> bool:
        """True when the pod takes a fraction of one GPU."""
        return self.gpu_count == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def gpu_milli_total(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """Everything a score may depend on (memory is a filter only): the score-cache key."""
        return (self.cpu_milli, self.gpu_milli, self.gpu_count, self.gpu_models)

    @property
    def fit_key(self) -> tuple[object, ...]:
        """Everything that decides where the pod fits (shape, memory, node constraints): the
        key of memos of what found no room."""
        return (*self.shape, self.memory_mib, self.constraints, self.share)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod runs: the node, the exact GPUs (each giving ``gpu_milli``), CPU and memory.

    It carries the amounts so that releasing it needs nothing but the placement itself.
    """

    pod: str
    node: str
    node_index: int
    gpus: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    #: The devices of the pod's DRA claims, when it has claims.
    devices: NodeAllocation | None = None
    #: a GPU share (``PodRequest.share``): it takes this much memory (MiB) of each GPU too
    share: bool = False
    gpu_memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No node can take the pod (or the gang); ``reasons`` count the rejecting checks."""

    pod: str
    reasons: tuple[str, ...] = field(default_factory=tuple)
