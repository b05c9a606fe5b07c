"""Properties of enqueue + allocate over random trees, clusters and job mixes (hypothesis):
quotas hold at every level, gangs start whole, every job that still waits says why, and the
order gives every job exactly once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.scheduler.batch.model import NO_LIMIT
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.ordering import ordered
from aipaas.scheduler.batch.run import decide
from tests.unit.scheduler.batch.batch_alloc_builders import (
    gpu_quota,
    job,
    node,
    queue,
    session,
    tree,
)

QUEUES = ["t1/a", "t1/b", "t2/c"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[object, ...]:
    quotas = {key: draw(st.none() | st.integers(0, 12)) for key in ["t1", "t2", *QUEUES]}
    nodes = [node(f"n{i}", gpu=draw(st.integers(1, 8))) for i in range(draw(st.integers(1, 4)))]
    specs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(QUEUES),
                st.integers(1, 4),  # tasks
                st.integers(1, 3),  # GPUs per task
                st.integers(0, 2),  # priority
                st.integers(0, 3),  # tasks above the gang
            ),
            max_size=12,
        )
    )
    mode = draw(st.sampled_from(["drf", "proportion", "fifo"]))
    strict = draw(st.booleans())
    return quotas, nodes, specs, mode, strict


@settings(max_examples=60, deadline=None)
@given(cases())
def test_quotas_gangs_and_reasons_hold(case: tuple[object, ...]) -> None:
    quotas, nodes, specs, mode, strict = case
    assert isinstance(quotas, dict) and isinstance(nodes, list) and isinstance(specs, list)
    queues = tree(
        *(
            queue(key, quota=NO_LIMIT if quotas[key] is None else gpu_quota(quotas[key]))
            for key in ["t1", "t2", *QUEUES]
        )
    )
    jobs = []
    for i, (leaf, gang, gpu, priority, extra) in enumerate(specs):
        jobs.append(
            job(
                f"{leaf.split('/')[0]}/j{i}",
                leaf,
                tasks=gang + extra,
                gpu=gpu,
                priority=priority,
                min_available=gang,
            )
        )
    options = BatchOptions(actions=("enqueue", "allocate"), fairShare=mode, strictOrder=strict)
    s = session(nodes, queues, jobs, options=options)
    keys = [j.key for j in ordered(s, jobs)]
    assert sorted(keys) == sorted(j.key for j in jobs)
    d = decide(s)
    for key, q in queues.items():
        if key:
            assert s.allocated[key].fits_within(q.quota), key
    for j in jobs:
        running = len(j.running_tasks)
        assert running == 0 or running >= j.min_available, j.key
        if running == 0:
            assert j.key in d.reasons and d.reasons[j.key][1], j.key
