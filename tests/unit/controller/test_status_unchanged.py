"""``status_unchanged`` (the cheap test the controller makes of every job every cycle) agrees
with building the status and comparing it, whatever moved since the status was written."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.api.job import Job, JobPhase
from aipaas.api.registry import load_objects
from aipaas.controller.work import JobWork, job_status, status_unchanged
from aipaas.store.tasks import TaskRecord


def _job(manifest: str) -> Job:
    job = load_objects(manifest)[0]
    assert isinstance(job, Job)
    return job


JOB = _job(
    """
apiVersion: aipaas/v1
kind: Job
metadata: {name: j, tenant: acme, uid: u-1}
spec:
  queue: q
  tasks: [{name: w, replicas: 2, command: ["true"]}]
"""
)
PHASES = ["Pending", "Starting", "Running", "Succeeded", "Failed", "Lost"]
NOW = "2026-01-01T00:00:00.000000Z"
LATER = "2026-01-01T00:00:09.000000Z"


def _record(index: int, phase: str, node: str | None, code: int | None, attempt: int) -> TaskRecord:
    return TaskRecord(
        job_uid="u-1",
        tenant="acme",
        job_name="j",
        name=f"w-{index}",
        group_name="w",
        index=index,
        rank=index,
        phase=phase,
        node=node,
        gpus=(0,) if node else (),
        exit_code=code,
        attempt=attempt,
    )


records = st.lists(
    st.builds(
        _record,
        st.just(0),
        st.sampled_from(PHASES),
        st.sampled_from([None, "n1"]),
        st.sampled_from([None, 0, 3]),
        st.integers(0, 2),
    ),
    min_size=0,
    max_size=2,
).map(lambda rs: [replace(r, name=f"w-{i}", index=i, rank=i) for i, r in enumerate(rs)])
moves = st.fixed_dictionaries(
    {
        "phase": st.sampled_from([None, JobPhase.SUCCEEDED, JobPhase.FAILED]),
        "reason": st.sampled_from(["", "Scheduled", "QuotaExceeded", "Running"]),
        "message": st.sampled_from(["", "why"]),
    }
)


@settings(max_examples=400, deadline=None)
@given(before=records, after=records, first=moves, then=moves)
def test_the_cheap_test_agrees_with_building_the_status(
    before: list[TaskRecord],
    after: list[TaskRecord],
    first: dict[str, object],
    then: dict[str, object],
) -> None:
    written = job_status(JobWork(JOB, before, **first), NOW)  # type: ignore[arg-type]
    job = JOB.model_copy(update={"status": written})
    assert isinstance(job, Job)
    item = JobWork(job, after, **then)  # type: ignore[arg-type]
    rebuilt = job_status(item, LATER)
    same = rebuilt.model_dump(mode="json") == written.model_dump(mode="json")
    assert status_unchanged(item) == same


def test_a_job_without_a_status_has_changed() -> None:
    assert not status_unchanged(JobWork(JOB, []))
