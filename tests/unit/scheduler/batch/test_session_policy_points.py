"""The batch session's policy extension points (batch/policy.py): every registered policy is
what its Protocol asks, the registry resolves every name a profile's YAML accepts and refuses
others naming the field, and a queue order or job order registered here changes what the
session starts, as worked out by hand in each test's docstring."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path

import pytest

from aipaas.scheduler.batch.fairshare_tree import demand_shares
from aipaas.scheduler.batch.model import Job, QueueNode, Resources
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.policy import (
    Admission,
    JobEntry,
    JobOrder,
    NodeKey,
    Policy,
    QueueOrder,
    SessionState,
    TreeShape,
    VictimOrder,
    entries_by_key,
)
from aipaas.scheduler.batch.policy_registry import POLICIES
from aipaas.scheduler.batch.run import decide
from aipaas.scheduler.framework.profile import load_profile
from tests.unit.scheduler.batch.batch_alloc_builders import job, node, queue, session, started, tree


def test_every_registered_policy_satisfies_its_protocol() -> None:
    kinds: list[tuple[Mapping[str, Policy], type]] = [
        (POLICIES.queue_orders.by_name, QueueOrder),
        (POLICIES.job_orders.by_name, JobOrder),
        (POLICIES.admissions.by_name, Admission),
        (POLICIES.victim_orders.by_name, VictimOrder),
    ]
    for by_name, protocol in kinds:
        assert by_name, protocol
        for name, policy in by_name.items():
            assert isinstance(policy, protocol), name
            assert policy.name == name


@pytest.mark.parametrize("fair_share", ["drf", "proportion", "fifo"])
@pytest.mark.parametrize("job_order", ["priority", "fifo"])
def test_the_names_a_profile_accepts_resolve_to_the_session_policy(
    fair_share: str, job_order: str
) -> None:
    options = BatchOptions(fairShare=fair_share, jobOrder=job_order)
    built = session([node("n1")], tree(queue("t")), [], options=options)
    assert built.policy.queue_order is POLICIES.queue_order(fair_share)
    assert built.policy.job_order is POLICIES.job_order(job_order)
    assert built.policy.queue_order.name == fair_share
    assert built.policy.job_order.name == job_order


def test_the_packaged_profiles_name_their_orders() -> None:
    """default: drf and priority; volcano: proportion and priority; fifo: fifo and fifo
    (src/aipaas/scheduler/profiles/*.yaml)."""
    expected = {
        "default": ("drf", "priority", TreeShape.TREE),
        "volcano": ("proportion", "priority", TreeShape.LEAVES),
        "fifo": ("fifo", "fifo", TreeShape.NONE),
    }
    for name, (queues, jobs, shape) in expected.items():
        batch = load_profile(name).spec.batch
        assert (batch.fairShare, batch.jobOrder) == (queues, jobs)
        assert POLICIES.queue_order(batch.fairShare).shape is shape


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "fairShare",
            "drff",
            "spec.batch.fairShare: Input should be 'drf', 'proportion' or 'fifo'",
        ),
        ("jobOrder", "newest", "spec.batch.jobOrder: Input should be 'priority' or 'fifo'"),
    ],
)
def test_an_unknown_name_is_a_one_line_error_naming_the_field(
    tmp_path: Path, field: str, value: str, message: str
) -> None:
    default = (resources.files("aipaas.scheduler") / "profiles" / "default.yaml").read_text()
    assert f"    {field}: " in default
    lines = [
        f"    {field}: {value}" if line.startswith(f"    {field}: ") else line
        for line in default.splitlines()
    ]
    path = tmp_path / "profile.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as raised:
        load_profile(str(path))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


class NewestFirst:
    """A job order of this test: the job submitted last first."""

    name = "newest-first"
    runs_by_priority = False

    def key(self, job: Job) -> tuple[int, int]:
        return (-job.order, 0)

    def entries(self, jobs: Iterable[Job]) -> list[JobEntry]:
        return entries_by_key(self.key, jobs)


class NewestQueueFirst:
    """A queue order of this test: the leaves flat, the queue created last first; no fair
    share limit (every queue's share is its demand)."""

    name = "newest-queue-first"
    shape = TreeShape.LEAVES
    limits_allocation = False
    reclaims_slivers = False

    def node_key(self, session: SessionState) -> Callable[[str], NodeKey]:
        queues = session.queues

        def key(node: str) -> NodeKey:
            return (0, 0, 0.0, -queues[node].created)

        return key

    def fair_shares(
        self,
        queues: Mapping[str, QueueNode],
        demand: Mapping[str, Resources],
        capacity: Resources,
        now: float,
        usage_over_time: bool,
    ) -> dict[str, Resources]:
        return demand_shares(queues, demand, capacity, now, usage_over_time)


@pytest.fixture
def newest_first() -> Iterator[NewestFirst]:
    order = NewestFirst()
    POLICIES.job_orders.register(order)
    yield order
    POLICIES.unregister(order)


@pytest.fixture
def newest_queue_first() -> Iterator[NewestQueueFirst]:
    order = NewestQueueFirst()
    POLICIES.queue_orders.register(order)
    yield order
    POLICIES.unregister(order)


def test_a_registered_job_order_starts_the_newest_job_first(newest_first: NewestFirst) -> None:
    """One node of one GPU, one queue, three one-GPU jobs submitted old, middle, new. By
    priority (all 0) the oldest starts; newest first, the new one does."""
    assert isinstance(newest_first, JobOrder)
    queues = tree(queue("t"), queue("t/a"))

    def first_started(job_order: str) -> dict[str, list[str]]:
        jobs = [job("t/old", "t/a"), job("t/middle", "t/a"), job("t/new", "t/a")]
        options = BatchOptions(actions=("enqueue", "allocate"), jobOrder=job_order)
        return started(decide(session([node("n1", gpu=1)], queues, jobs, options=options)))

    assert first_started("priority") == {"t/old": ["w-0"]}
    assert first_started("newest-first") == {"t/new": ["w-0"]}


def test_a_registered_queue_order_starts_the_newest_queue_first(
    newest_queue_first: NewestQueueFirst,
) -> None:
    """One node of one GPU, queues t/a then t/b (created in that order), one one-GPU job in
    each, t/a's submitted first. DRF: both hold nothing, equal priority: t/a (created first)
    goes first; newest queue first: t/b's job starts."""
    assert isinstance(newest_queue_first, QueueOrder)
    queues = tree(queue("t"), queue("t/a"), queue("t/b"))

    def first_started(fair_share: str) -> dict[str, list[str]]:
        jobs = [job("t/a1", "t/a"), job("t/b1", "t/b")]
        options = BatchOptions(actions=("enqueue", "allocate"), fairShare=fair_share)
        return started(decide(session([node("n1", gpu=1)], queues, jobs, options=options)))

    assert first_started("drf") == {"t/a1": ["w-0"]}
    assert first_started("newest-queue-first") == {"t/b1": ["w-0"]}


def test_a_name_is_known_only_while_registered(newest_first: NewestFirst) -> None:
    assert BatchOptions(jobOrder="newest-first").jobOrder == "newest-first"
    POLICIES.unregister(newest_first)
    try:
        with pytest.raises(ValueError, match="Input should be 'priority' or 'fifo'"):
            BatchOptions(jobOrder="newest-first")
    finally:
        POLICIES.job_orders.register(newest_first)


class AnotherFifo(NewestFirst):
    name = "fifo"


def test_the_registry_refuses_a_second_policy_of_one_name_and_a_stranger() -> None:
    with pytest.raises(ValueError, match="already registered"):
        POLICIES.job_orders.register(AnotherFifo())
    with pytest.raises(TypeError, match="is not a QueueOrder"):
        POLICIES.queue_orders.register(NewestFirst())  # type: ignore[arg-type]
