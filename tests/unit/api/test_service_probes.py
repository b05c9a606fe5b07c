"""Service probes as Kubernetes defines them: the three kinds, the three actions, Kubernetes'
defaults, the short ``path`` form, ``healthCheck`` as a readiness probe only, and refusals
that name the field at fault."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.registry import parse_object
from aipaas.api.service import Service
from aipaas.errors import InvalidObject


def service(**template: Any) -> Service:
    parsed = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Service",
            "metadata": {"name": "embed", "tenant": "acme"},
            "spec": {"template": {"command": ["serve"], **template}},
        }
    )
    assert isinstance(parsed, Service)
    return parsed


def refusal(**template: Any) -> dict[str, str]:
    with pytest.raises(InvalidObject) as caught:
        service(**template)
    return {error.path: error.reason for error in caught.value.fields}


def test_each_kind_takes_each_action_with_kubernetes_defaults() -> None:
    template = service(
        startupProbe={"httpGet": {"path": "/ready", "port": 9000}, "failureThreshold": 60},
        readinessProbe={"tcpSocket": {}},
        livenessProbe={"exec": {"command": ["cat", "/tmp/healthy"]}},
    ).spec.template
    startup, readiness, liveness = (
        template.startup_probe,
        template.readiness_probe,
        template.liveness_probe,
    )
    assert startup is not None and startup.http_get is not None
    assert (startup.http_get.path, startup.http_get.port) == ("/ready", 9000)
    assert startup.failure_threshold == 60
    assert readiness is not None and readiness.tcp_socket is not None
    assert readiness.tcp_socket.port is None  # the replica's own $PORT
    assert liveness is not None and liveness.exec_ is not None
    assert liveness.exec_.command == ["cat", "/tmp/healthy"]
    for probe in (startup, readiness, liveness):
        assert probe.initial_delay_seconds == 0
        assert probe.timeout_seconds == 1
        assert probe.success_threshold == 1
    assert readiness.period_seconds == 10 and readiness.failure_threshold == 3


def test_probes_survive_a_round_trip_through_the_wire() -> None:
    first = service(
        startupProbe={"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 30},
        readinessProbe={"httpGet": {"path": "/r", "httpHeaders": [{"name": "X-A", "value": "1"}]}},
    )
    wire = first.to_wire()
    assert wire["spec"]["template"]["startupProbe"]["exec"] == {"command": ["true"]}
    again = parse_object(wire)
    assert isinstance(again, Service) and again.spec == first.spec


def test_the_short_path_form_is_an_http_get() -> None:
    probe = service(readinessProbe={"path": "/health", "periodSeconds": 1}).spec.template.readiness
    assert probe is not None and probe.http_get is not None and probe.http_get.path == "/health"
    assert probe.period_seconds == 1


def test_a_health_check_is_a_readiness_probe_that_never_restarts() -> None:
    template = service(healthCheck={"path": "/health"}).spec.template
    assert template.liveness_probe is None and template.startup_probe is None
    assert template.readiness is not None and template.readiness.period_seconds == 2.0
    own = service(healthCheck={"path": "/h"}, readinessProbe={"tcpSocket": {}}).spec.template
    assert own.readiness is not None and own.readiness.tcp_socket is not None


@pytest.mark.parametrize(
    ("template", "path", "words"),
    [
        ({"readinessProbe": {}}, "spec.template.readinessProbe", "exactly one of httpGet"),
        (
            {"livenessProbe": {"tcpSocket": {}, "exec": {"command": ["x"]}}},
            "spec.template.livenessProbe",
            "found tcpSocket, exec",
        ),
        (
            {"livenessProbe": {"tcpSocket": {}, "successThreshold": 2}},
            "spec.template.livenessProbe.successThreshold",
            "must be 1",
        ),
        (
            {"startupProbe": {"tcpSocket": {}, "successThreshold": 3}},
            "spec.template.startupProbe.successThreshold",
            "must be 1",
        ),
        (
            {"startupProbe": {"httpGet": {"path": "ready"}}},
            "spec.template.startupProbe.httpGet.path",
            "absolute URL path",
        ),
        (
            {"readinessProbe": {"tcpSocket": {"port": 70000}}},
            "spec.template.readinessProbe.tcpSocket.port",
            "less than or equal to 65535",
        ),
        (
            {"readinessProbe": {"exec": {"command": []}}},
            "spec.template.readinessProbe.exec.command",
            "at least 1",
        ),
        (
            {"readinessProbe": {"tcpSocket": {}, "periodSeconds": 0}},
            "spec.template.readinessProbe.periodSeconds",
            "greater than 0",
        ),
        (
            {"readinessProbe": {"tcpSocket": {}, "failureThreshold": 0}},
            "spec.template.readinessProbe.failureThreshold",
            "greater than or equal to 1",
        ),
        (
            {"livenessProbe": {"path": "/a", "httpGet": {"path": "/b"}}},
            "spec.template.livenessProbe",
            "give path or httpGet, not both",
        ),
        (
            {"readinessProbe": {"grpc": {"port": 1}}},
            "spec.template.readinessProbe.grpc",
            "unknown field",
        ),
    ],
)
def test_bad_probes_are_refused_naming_the_field(
    template: dict[str, Any], path: str, words: str
) -> None:
    errors = refusal(**template)
    assert path in errors, errors
    assert words in errors[path], errors


def test_the_queue_bound_defaults_to_five_minutes_and_is_the_services_own() -> None:
    spec = service().spec
    assert spec.queue_timeout_seconds == 300 and spec.request_timeout_seconds == 60
