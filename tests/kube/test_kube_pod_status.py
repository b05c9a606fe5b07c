"""A task's state from its pod: the phase, the container's exit code, and its node."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.backends.base import TaskState
from aipaas.backends.kubernetes.pod_status import task_status


def pod(phase: str, *, node: str = "gpu-a", code: int | None = None, reason: str = "") -> Any:
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status["reason"] = reason
    if code is not None:
        status["containerStatuses"] = [
            {"name": "task", "state": {"terminated": {"exitCode": code}}}
        ]
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node}, "status": status}


@pytest.mark.parametrize(
    ("given", "state", "code"),
    [
        (pod("Pending"), TaskState.RUNNING, None),
        (pod("Running"), TaskState.RUNNING, None),
        (pod("Succeeded", code=0), TaskState.SUCCEEDED, 0),
        (pod("Failed", code=3), TaskState.FAILED, 3),
        (pod("Failed", reason="Evicted"), TaskState.LOST, None),  # killed without an exit code
        (pod("Unknown"), TaskState.UNREACHABLE, None),  # its node stopped reporting
        (pod("Running", node="gone"), TaskState.LOST, None),  # its node was removed
    ],
)
def test_the_state_a_pod_says(given: Any, state: TaskState, code: int | None) -> None:
    answer = task_status("rid", given, {"gpu-a"})
    assert (answer.state, answer.exit_code) == (state, code)


def test_an_evicted_pod_says_why() -> None:
    answer = task_status("rid", pod("Failed", reason="Evicted"), {"gpu-a"})
    assert "Evicted" in answer.message
