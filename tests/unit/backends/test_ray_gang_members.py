"""The gang a start request carries for a backend that reserves gangs at once (Ray's placement
groups): which tasks start together, and what the backend reads back."""

from __future__ import annotations

import dataclasses

from aipaas.api.job import Job
from aipaas.api.registry import load_objects
from aipaas.backends.gang import GANG_ANNOTATION, gang_of, places_gangs
from aipaas.controller.launch import make_request
from aipaas.store import TaskRecord


def job() -> Job:
    text = (
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: g, tenant: t, uid: u1}\n"
        "spec:\n  queue: q\n  tasks: [{name: w, replicas: 3, command: ['true'],"
        " resources: {gpu: 2, cpu: '1500m'}}]\n"
    )
    parsed = load_objects(text)[0]
    assert isinstance(parsed, Job)
    return parsed


def record(index: int, **changes: object) -> TaskRecord:
    base = TaskRecord(
        job_uid="u1",
        tenant="t",
        job_name="g",
        name=f"w-{index}",
        group_name="w",
        index=index,
        rank=index,
        phase="Starting",
        node=f"n{index}",
        gpus=(0, 1),
        gpu_milli=1000,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_tasks_starting_in_the_same_round_are_the_gang() -> None:
    records = [record(0), record(1), record(2)]
    request = make_request(job(), records[1], records, {}, gang=True)
    gang = gang_of(request)
    assert gang is not None and gang.key == "u1.0" and gang.job == "u1"
    assert [(m.rank, m.task, m.node, m.gpus, m.cpu_milli) for m in gang.members] == [
        (0, "w-0", "n0", 2, 1500),
        (1, "w-1", "n1", 2, 1500),
        (2, "w-2", "n2", 2, 1500),
    ]
    assert gang.member("w-1") == gang.members[1]


def test_a_task_restarted_alone_is_a_gang_of_one() -> None:
    """The others run (or wait for a later restart): only the task itself starts now."""
    again = record(1, attempt=1)
    records = [record(0, phase="Running"), again, record(2, phase="Pending", attempt=1)]
    gang = gang_of(make_request(job(), again, records, {}, gang=True))
    assert gang is not None and gang.key == "u1.1"
    assert [m.task for m in gang.members] == ["w-1"]


def test_no_gang_unless_the_backend_asks_and_unreadable_ones_are_none() -> None:
    records = [record(0), record(1)]
    plain = make_request(job(), records[0], records, {})
    assert GANG_ANNOTATION not in plain.annotations and gang_of(plain) is None
    broken = dataclasses.replace(plain, annotations={GANG_ANNOTATION: '{"members": [[1]]}'})
    assert gang_of(broken) is None

    class Asks:
        places_gangs = True

    assert places_gangs(Asks()) and not places_gangs(object())
