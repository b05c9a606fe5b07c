"""Service manifests: what is accepted, and the field each refusal names."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.registry import parse_object
from aipaas.api.service import Service, budget_replicas
from aipaas.errors import InvalidObject


def manifest(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"template": {"command": ["python3", "-m", "http.server"]}}
    body.update(spec)
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Service",
        "metadata": {"name": "echo", "tenant": "acme"},
        "spec": body,
    }


def refusal(**spec: Any) -> dict[str, str]:
    with pytest.raises(InvalidObject) as caught:
        parse_object(manifest(**spec))
    return {error.path: error.reason for error in caught.value.fields}


def test_a_full_service_parses_with_its_defaults() -> None:
    service = parse_object(
        manifest(
            queue="serving",
            minReplicas=0,
            maxReplicas=8,
            template={
                "command": ["python3", "serve.py"],
                "resources": {"cpu": "500m", "gpu": 0.5},
                "readinessProbe": {"path": "/ready", "periodSeconds": 0.5},
                "livenessProbe": {"path": "/live", "failureThreshold": 2},
            },
            rollingUpdate={"maxSurge": "25%", "maxUnavailable": 0},
            autoscaling={"target": 4, "stableWindowSeconds": 10, "panicWindowSeconds": 2},
            scheduledMinimums=[
                {
                    "replicas": 2,
                    "start": "08:00",
                    "end": "18:00",
                    "days": ["Mon", "Tue"],
                    "timeZone": "Europe/Paris",
                }
            ],
        )
    )
    assert isinstance(service, Service)
    assert service.spec.preemptible is False  # inference is not preempted unless it says
    assert service.spec.autoscaling is not None and service.spec.autoscaling.metric == "concurrency"
    assert service.spec.template.resources.amounts().gpu_milli == 500
    assert service.spec.replica_limit == 8


def test_the_revision_follows_the_template_only() -> None:
    first = parse_object(manifest())
    scaled = parse_object(manifest(minReplicas=3))
    changed = parse_object(manifest(template={"command": ["python3", "other.py"]}))
    assert isinstance(first, Service) and isinstance(scaled, Service)
    assert isinstance(changed, Service)
    assert first.spec.revision() == scaled.spec.revision()
    assert first.spec.revision() != changed.spec.revision()


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"minReplicas": 3, "maxReplicas": 2}, "spec.maxReplicas", "2 is less than minReplicas"),
        ({"minReplicas": 0}, "spec.minReplicas", "scales to zero only with spec.autoscaling"),
        ({"minReplicas": -1}, "spec.minReplicas", "greater than or equal to 0"),
        (
            {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}},
            "spec.rollingUpdate",
            "cannot both be 0",
        ),
        ({"rollingUpdate": {"maxSurge": "150%"}}, "spec.rollingUpdate.maxSurge", "percentage"),
        ({"autoscaling": {"target": 0}}, "spec.autoscaling.target", "greater than 0"),
        (
            {"autoscaling": {"target": 1, "stableWindowSeconds": 2, "panicWindowSeconds": 5}},
            "spec.autoscaling",
            "panic window is the short one",
        ),
        ({"autoscaling": {"target": 1, "metric": "cpu"}}, "spec.autoscaling.metric", "concurrency"),
        (
            {"scheduledMinimums": [{"replicas": 1, "start": "25:00", "end": "10:00"}]},
            "spec.scheduledMinimums[0].start",
            "HH:MM",
        ),
        (
            {
                "scheduledMinimums": [
                    {"replicas": 1, "start": "08:00", "end": "10:00", "days": ["Monday"]}
                ]
            },
            "spec.scheduledMinimums[0].days",
            "is not a day",
        ),
        (
            {
                "scheduledMinimums": [
                    {"replicas": 1, "start": "08:00", "end": "10:00", "timeZone": "Mars/Olympus"}
                ]
            },
            "spec.scheduledMinimums[0].timeZone",
            "unknown time zone",
        ),
        (
            {
                "maxReplicas": 2,
                "scheduledMinimums": [{"replicas": 5, "start": "08:00", "end": "10:00"}],
            },
            "spec.scheduledMinimums[0].replicas",
            "5 is more than maxReplicas",
        ),
        (
            {"template": {"command": ["x"], "env": {"PORT": "80"}}},
            "spec.template.env",
            "PORT is set by the platform",
        ),
        (
            {"template": {"command": ["x"], "readinessProbe": {"path": "health"}}},
            "spec.template.readinessProbe.httpGet.path",
            "absolute URL path",
        ),
        ({"template": {"command": []}}, "spec.template.command", "at least 1"),
        ({"public": "yes"}, "spec.public", "boolean"),
        ({"replicas": 3, "minReplicas": 1}, "spec", "replicas: give replicas or minReplicas"),
        ({"replicas": "many"}, "spec", "replicas: must be a number of replicas or {min: N"),
        (
            {"template": {"command": ["x"], "restartPolicy": "Never"}},
            "spec.template.restartPolicy",
            "Always is the only policy",
        ),
        ({"port": 22}, "spec.port", "greater than or equal to 1024"),
        ({"replicas": 3, "colour": "red"}, "spec.colour", "unknown field"),
    ],
)
def test_bad_fields_are_named(spec: dict[str, Any], path: str, words: str) -> None:
    errors = refusal(**spec)
    assert path in errors, errors
    assert words in errors[path], errors


def test_budgets_in_replicas() -> None:
    assert budget_replicas("25%", 6, round_up=True) == 2
    assert budget_replicas("25%", 6, round_up=False) == 1
    assert budget_replicas(3, 6, round_up=False) == 3


def test_replicas_short_forms_restart_always_and_a_fixed_port() -> None:
    fixed = parse_object(manifest(replicas=3))
    ranged = parse_object(manifest(replicas={"min": 0, "max": 4}, autoscaling={"target": 1}))
    assert isinstance(fixed, Service) and isinstance(ranged, Service)
    assert (fixed.spec.min_replicas, fixed.spec.replica_limit) == (3, 3)
    assert (ranged.spec.min_replicas, ranged.spec.replica_limit) == (0, 4)
    again = parse_object(fixed.to_wire())  # a fetched service applies again as it was
    assert isinstance(again, Service) and again.spec == fixed.spec
    always = parse_object(manifest(template={"command": ["x"], "restartPolicy": "Always"}))
    assert isinstance(always, Service) and always.spec.template.restart_policy == "Always"
    on_port = parse_object(manifest(port=8080))
    assert isinstance(on_port, Service) and on_port.spec.port == 8080
    assert on_port.spec.revision() != fixed.spec.revision()  # a new port rolls the replicas


def test_a_health_check_is_a_readiness_probe_only() -> None:
    template = {"command": ["x"], "healthCheck": {"path": "/health"}}
    both = parse_object(manifest(template=template))
    assert isinstance(both, Service)
    assert both.spec.template.liveness_probe is None  # it never restarts a replica
    readiness = both.spec.template.readiness
    assert readiness is not None and readiness.http_get is not None
    assert readiness.http_get.path == "/health" and readiness.period_seconds == 2.0
    own = {**template, "readinessProbe": {"path": "/ready"}}
    mixed = parse_object(manifest(template=own))
    assert isinstance(mixed, Service) and mixed.spec.template.readiness is not None
    assert mixed.spec.template.readiness.http_get is not None
    assert mixed.spec.template.readiness.http_get.path == "/ready"
    again = parse_object(both.to_wire())
    assert isinstance(again, Service) and again.spec.revision() == both.spec.revision()
