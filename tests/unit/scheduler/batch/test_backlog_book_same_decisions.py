"""The backlog kept across cycles (batch/backlog_book.py) and the order over its groups
(batch/ordering_groups.py): a run whose sessions take the backlog from the book decides, cycle
by cycle, exactly what a run whose sessions walk every job decides (hypothesis, over random
queue trees with a budget's hold on a leaf, users with quotas, job mixes, arrivals, durations
and profiles); the book's sums and groups always
equal a fresh walk over the jobs; the grouped order gives the jobs in the plain order's."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.scheduler.batch.backlog_book import BacklogBook
from aipaas.scheduler.batch.model import Decisions, Job, Snapshot
from aipaas.scheduler.batch.ordering import JobOrder
from aipaas.scheduler.batch.ordering_groups import GroupedOrder
from aipaas.scheduler.batch.run import run_session
from aipaas.scheduler.batch.session import Session, gang_entry, job_total
from aipaas.sim.scenario import validate_document
from aipaas.sim.scenario_build import build_scenario
from aipaas.sim.scenario_run import ScenarioRun
from tests.unit.scheduler.batch.batch_alloc_builders import job, node, queue, session, tree

LEAVES = ("p0-a", "p0-b", "p1-a", "p1-b")

job_strategy = st.tuples(
    st.sampled_from(LEAVES),
    st.sampled_from([10, 50, 100]),  # priority
    st.sampled_from([0, 1, 2, 4]),  # GPUs per task (0: CPU only)
    st.sampled_from([1, 1, 1, 2, 3]),  # replicas
    st.integers(0, 2),  # replicas above minAvailable (elastic)
    st.booleans(),  # preemptible
    st.integers(1, 30),  # duration
    st.one_of(st.none(), st.integers(0, 40)),  # arrival
    st.sampled_from([None, None, None, "required", "preferred"]),  # rack topology
    st.sampled_from([None, None, None, 5, 20]),  # time limit (seconds)
    st.one_of(st.none(), st.none(), st.integers(0, 29)),  # depends on job i (an earlier one)
    st.sampled_from([None, "u0", "u1"]),  # who submitted it (u0 may have a quota)
)
tree_strategy = st.tuples(
    st.lists(st.integers(0, 4), min_size=4, max_size=4),  # leaf guarantees (GPUs)
    st.lists(st.sampled_from([2, 4, 8, 16]), min_size=4, max_size=4),  # leaf quotas
    st.lists(st.integers(1, 3), min_size=4, max_size=4),  # leaf weights
    st.lists(st.sampled_from([None, None, 0, 10]), min_size=2, max_size=2),  # parents' minRuntime
    st.sampled_from([None, None, 0, 3]),  # a leaf a budget holds (its index)
    st.sampled_from([None, 2, 4]),  # user u0's GPU quota
)


Shape = tuple[list[int], list[int], list[int], list[int | None], int | None, int | None]


def _document(jobs: list[tuple[Any, ...]], shape: Shape, profile: str) -> dict[str, Any]:
    guaranteed, quotas, weights, min_runtimes, held, user_quota = shape
    objects: list[dict[str, Any]] = [
        {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}},
    ]
    if user_quota is not None:
        objects.append(
            {"apiVersion": "aipaas/v1", "kind": "User", "metadata": {"name": "u0", "tenant": "t"}}
            | {"spec": {"quota": {"gpu": user_quota}}}
        )
    for parent, min_runtime in zip(("p0", "p1"), min_runtimes, strict=True):
        objects.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Queue",
                "metadata": {"name": parent, "tenant": "t"},
                "spec": {} if min_runtime is None else {"minRuntime": min_runtime},
            }
        )
    for i, leaf in enumerate(LEAVES):
        queue_spec = {
            "parent": leaf[:2],
            "weight": weights[i],
            "guaranteed": {"gpu": min(guaranteed[i], quotas[i])},
            "quota": {"gpu": quotas[i]},
        }
        metadata: dict[str, Any] = {"name": leaf, "tenant": "t"}
        if held == i:
            metadata["annotations"] = {"aipaas.dev/admission-stopped": "b1"}
        objects.append(
            {"apiVersion": "aipaas/v1", "kind": "Queue", "metadata": metadata}
            | {"spec": queue_spec}
        )
    arrivals, durations = [], []
    for i, job_spec in enumerate(jobs):
        leaf, priority, gpu, replicas, extra, preemptible, seconds, at, topo, limit, after, user = (
            job_spec
        )
        resources: dict[str, Any] = {"cpu": 1} if gpu == 0 else {"gpu": gpu}
        spec: dict[str, Any] = {
            "queue": leaf,
            "priority": priority,
            "preemptible": preemptible,
            "minAvailable": replicas,
            "tasks": [
                {
                    "name": "w",
                    "replicas": replicas + extra,
                    "command": ["x"],
                    "resources": resources,
                }
            ],
        }
        if topo is not None:
            spec["topology"] = {topo: "topology.aipaas.dev/rack"}
        if limit is not None:
            spec["timeLimit"] = limit
        if after is not None and after < i:  # submitted when it succeeds: out of listing order
            spec["dependsOn"] = [f"j{after}"]
        job_meta: dict[str, Any] = {"name": f"j{i}", "tenant": "t"}
        if user is not None:
            job_meta["annotations"] = {"aipaas.dev/submitted-by": user}
        objects.append(
            {"apiVersion": "aipaas/v1", "kind": "Job", "metadata": job_meta} | {"spec": spec}
        )
        durations.append({"job": f"t/j{i}", "seconds": seconds})
        if at is not None:
            arrivals.append({"job": f"t/j{i}", "at": at})
    nodes = [
        {"name": f"n{k}", "gpu": 4, "cpu": 8, "labels": {"topology.aipaas.dev/rack": f"r{k // 2}"}}
        for k in range(4)
    ]
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "spec": {
            "profile": profile,
            "nodes": nodes,
            "objects": objects,
            "arrivals": arrivals,
            "durations": durations,
        },
    }


class _Recorded(ScenarioRun):
    """A run that records every cycle's decisions; ``book``: sessions take the backlog from
    the book (the simulator's way) or walk every job (the live controller's way)."""

    def __init__(self, document: dict[str, Any], *, book: bool, hold: bool) -> None:
        scenario = build_scenario(validate_document(document), honour_arrivals=True)
        options = scenario.options.model_copy(update={"holdForHead": hold})
        super().__init__(replace(scenario, options=options))
        self.with_book = book
        self.seen: list[Decisions] = []

    def _decide(self, snapshot: Snapshot) -> Decisions:
        if self.with_book:
            _check_book(self.book, snapshot.jobs)
            decisions = super()._decide(snapshot)
        else:
            decisions = run_session(snapshot, self.engine, self.scenario.options)
        self.seen.append(decisions)
        return decisions


def _check_book(book: BacklogBook, jobs: list[Job]) -> None:
    """The book holds exactly ``jobs``: its idle part, sums and groups as a fresh walk says."""
    idle = {
        j.key: j
        for j in jobs
        if len(j.tasks) == 1 and j.tasks[0].placement is None and gang_entry(j) is not None
    }
    assert set(book.idle) == set(idle)
    assert set(book.others) == {j.key for j in jobs} - set(idle)
    sums: dict[str, list[int]] = {}
    for j in idle.values():
        row = sums.setdefault(j.queue, [0, 0, 0, 0])
        for i, amount in enumerate(job_total(j)):
            row[i] += amount
    assert book.sums == sums
    for (leaf, priority, level, least, _), group in book.groups.items():
        assert group.orders == sorted(group.orders) == [j.order for j in group.jobs]
        assert set(group.members) == {j.key for j in group.jobs}
        for j in group.jobs:
            assert (j.queue, j.priority, j.topology_required, j.min_available) == (
                leaf,
                priority,
                level,
                least,
            )
    assert sum(len(g.jobs) for g in book.groups.values()) == len(idle)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(job_strategy, min_size=1, max_size=30),
    tree_strategy,
    st.sampled_from(["default", "volcano", "fifo"]),
    st.booleans(),
)
def test_a_run_with_the_book_decides_what_a_run_without_it_decides(
    jobs: list[tuple[Any, ...]],
    shape: Shape,
    profile: str,
    hold: bool,
) -> None:
    document = _document(jobs, shape, profile)
    with_book = _Recorded(document, book=True, hold=hold)
    walked = _Recorded(document, book=False, hold=hold)
    assert with_book.run() == walked.run()
    assert len(with_book.seen) == len(walked.seen)
    for cycle, (ours, theirs) in enumerate(zip(with_book.seen, walked.seen, strict=True)):
        assert ours == theirs, f"cycle {cycle} differs"


def test_the_book_refuses_a_job_twice_and_an_order_taken() -> None:
    book = BacklogBook()
    first = job("t/a", "t/q")
    book.add(first)
    with pytest.raises(ValueError, match="in the book already"):
        book.add(first)
    second = job("t/b", "t/q")
    second.order = first.order
    with pytest.raises(ValueError, match=f"order {first.order} is taken"):
        book.add(second)


def test_a_session_refuses_a_book_that_does_not_hold_its_jobs() -> None:
    queues = tree(queue("t"), queue("t/q"))
    jobs = [job("t/a", "t/q"), job("t/b", "t/q")]
    book = BacklogBook()
    book.add(jobs[0])
    built = session([node("n1")], queues, jobs)
    with pytest.raises(ValueError, match="does not hold the snapshot's jobs"):
        Session(built.snapshot, built.engine, book=book)


def test_a_started_job_leaves_the_idle_part_and_an_evicted_one_comes_back() -> None:
    queues = tree(queue("t"), queue("t/q"))
    waiting = job("t/a", "t/q", gpu=2)
    book = BacklogBook()
    book.add(waiting)
    assert set(book.idle) == {"t/a"} and book.sums == {"t/q": [2000, 1000, 1024, 0]}
    built = session([node("n1")], queues, [waiting], running={"t/a": ["n1"]})
    book.sync(waiting)
    assert set(book.others) == {"t/a"} and not book.idle and not book.sums and not book.groups
    placement = waiting.tasks[0].placement
    assert placement is not None
    built.engine.release(placement)
    waiting.tasks[0].placement = None
    book.sync(waiting)
    assert set(book.idle) == {"t/a"} and len(book.groups) == 1
    book.remove(waiting)
    assert len(book) == 0 and not book.sums


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["t/a", "t/b"]), st.sampled_from([1, 5]), st.integers(1, 2)),
        min_size=8,
        max_size=60,
    ),
    st.lists(
        st.sampled_from(["pop", "pop", "alike", "alike-any", "alike-levels", "drain"]),
        min_size=8,
        max_size=60,
    ),
    st.randoms(use_true_random=False),
)
def test_the_grouped_order_gives_the_plain_orders_jobs(
    specs: list[tuple[str, int, int]], steps: list[str], rng: random.Random
) -> None:
    queues = tree(queue("t"), queue("t/a"), queue("t/b"))
    orders = rng.sample(range(1000), len(specs))  # unique, not in listing order
    jobs = []
    for i, (leaf, priority, gpus) in enumerate(specs):
        one = job(f"t/j{i}", leaf, gpu=gpus, priority=priority)
        one.order = orders[i]
        gang_entry(one)  # what a waiting job seen before carries (its gang kind)
        jobs.append(one)
    built = session([node("n1")], queues, jobs)
    book = BacklogBook()
    singles = []
    for one in jobs:
        if rng.random() < 0.75:
            book.add(one)
        else:
            singles.append(one)
    groups = [(g.jobs, g.orders) for g in book.groups.values()]
    plain = JobOrder(built, jobs)
    grouped = GroupedOrder(built, groups, singles)
    last: Job | None = None
    for step in [*steps, *["pop"] * len(jobs)]:
        if step == "pop":
            popped, ours_popped = plain.pop(), grouped.pop()
            assert popped is ours_popped
            last = popped or last
        elif step.startswith("alike") and last is not None:
            same_priority = step != "alike-any"
            level = step != "alike-levels"
            ours = grouped.take_alike(last, priority=same_priority, level=level)
            theirs = plain.take_alike(last, priority=same_priority, level=level)
            assert [j.key for j in ours] == [j.key for j in theirs]
        elif step == "drain":
            leaf = rng.choice(["t/a", "t/b"])
            assert sorted(j.key for j in grouped.drain(leaf)) == sorted(
                j.key for j in plain.drain(leaf)
            )
    assert plain.pop() is None and grouped.pop() is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["t/a", "t/b"]), st.sampled_from([1, 5]), st.integers(1, 2)),
        min_size=1,
        max_size=30,
    ),
    st.randoms(use_true_random=False),
    st.booleans(),
    st.booleans(),
)
def test_candidates_pass_over_only_groups_the_look_turns_away(
    specs: list[tuple[str, int, int]], rng: random.Random, use_may: bool, use_above: bool
) -> None:
    jobs = []
    book = BacklogBook()
    for i, (leaf, priority, gpus) in enumerate(specs):
        one = job(f"t/j{i}", leaf, gpu=gpus, priority=priority)
        book.add(one)
        jobs.append(one)
    waiting = {j.key: j for j in jobs if rng.random() < 0.8}  # the rest started this cycle
    # A look that answers alike for jobs alike (by leaf, priority and request), as callers'.
    answers = {
        (leaf, p, g): rng.random() < 0.5 for leaf in ("t/a", "t/b") for p in (1, 5) for g in (1, 2)
    }

    def may(one: Job) -> bool:
        return answers[(one.queue, one.priority, one.tasks[0].request.gpu_count)]

    above = {"t/a": rng.choice([0, 1, 5])} if use_above else None  # t/b: not named, none passes

    def passes(one: Job) -> bool:
        if above is not None and one.priority <= above.get(one.queue, 2**63):
            return False
        return not use_may or may(one)

    named = book.candidates(waiting, may if use_may else None, above)
    assert len(named) == len(set(named))
    # Nothing the look turns away is named (the look answers alike within a group; a job
    # that started is named only as part of a group that passes).
    everyone = {j.key: j for j in jobs}
    assert all(passes(everyone[k]) for k in named)
    assert {k for k in named if k in waiting and passes(waiting[k])} == {
        k for k, one in waiting.items() if passes(one)
    }
