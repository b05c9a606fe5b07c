"""A job that names itself in spec.dependsOn is refused with the entry at fault named."""

from __future__ import annotations

import pytest

from tests.unit.server.api_world import Api

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: train}}
spec:
  queue: research
  dependsOn: {depends}
  tasks: [{{name: w, command: ["true"]}}]
"""


@pytest.mark.parametrize(("depends", "path"), [("[train]", "[0]"), ("[other, train]", "[1]")])
def test_a_job_cannot_depend_on_itself(api: Api, depends: str, path: str) -> None:
    answer = api.client.post(
        "/api/v1/apply", content=JOB.format(depends=depends), headers=api.as_("alice")
    )
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert [f["path"] for f in body["fields"]] == [f"spec.dependsOn{path}"]
    assert body["fields"][0]["path"].startswith("spec.dependsOn")
    assert "cannot depend on itself" in body["fields"][0]["reason"]
    assert api.store.find("Job", "acme", "train") is None
