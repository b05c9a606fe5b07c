"""``spec.running[].since`` is a virtual time like ``now`` and ``arrivals[].at``: a negative
one is refused with an error naming the field (it was taken, and reported as a start at -10)."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.errors import InvalidObject
from aipaas.sim.scenario import validate_document


def _document(since: float) -> dict[str, Any]:
    job = {"name": "w", "replicas": 1, "command": ["x"], "resources": {"gpu": 1}}
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "spec": {
            "now": 100,
            "nodes": [{"name": "n1", "gpu": 1}],
            "objects": [
                {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}},
                {
                    "apiVersion": "aipaas/v1",
                    "kind": "Queue",
                    "metadata": {"name": "q", "tenant": "t"},
                },
                {
                    "apiVersion": "aipaas/v1",
                    "kind": "Job",
                    "metadata": {"name": "a", "tenant": "t"},
                    "spec": {"queue": "q", "tasks": [job]},
                },
            ],
            "running": [{"job": "t/a", "since": since, "nodes": {"w-0": "n1"}}],
        },
    }


def test_a_negative_since_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidObject) as caught:
        validate_document(_document(-10))
    paths = [f.path for f in caught.value.fields]
    assert paths == ["spec.running[0].since"], caught.value.fields
    assert "greater than or equal to 0" in caught.value.fields[0].reason


@pytest.mark.parametrize("since", [0, 50])
def test_since_zero_and_later_are_taken(since: float) -> None:
    document = validate_document(_document(since))
    assert [r.since for r in document.spec.running] == [since]
