"""The JSONPath templates of `-o jsonpath=` and `wait --for=jsonpath=`, and label selectors."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.cli.selectors import SelectorError, make_filter, matches, parse_selector
from aipaas.client_streams import condition
from aipaas.jsonpath import JsonPathError, render

A: dict[str, Any] = {
    "metadata": {"name": "a", "labels": {"team": "nlp"}, "annotations": {"x.io/y": "v"}},
    "spec": {"queue": "q1", "tasks": [{"replicas": 2}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}
B: dict[str, Any] = {
    "metadata": {"name": "b"},
    "spec": {"queue": "q2"},
    "status": {"phase": "Pending"},
}
LIST: dict[str, Any] = {"kind": "List", "items": [A, B]}


class TestJsonPath:
    @pytest.mark.parametrize(
        ("template", "expected"),
        [
            ("{.items[*].metadata.name}", "a b"),
            (".items[0].metadata.name", "a"),  # no braces: one expression
            ("{.items[-1].metadata.name}", "b"),
            ("{.items[0].metadata.annotations['x.io/y']}", "v"),
            ("{.items[0].metadata.annotations.x\\.io/y}", "v"),
            (
                '{range .items[*]}{.metadata.name}:{.status.phase}{"\\n"}{end}',
                "a:Running\nb:Pending\n",
            ),
            ('{.items[?(@.status.phase=="Pending")].metadata.name}', "b"),
            ("{.items[?(@.status.phase!='Pending')].metadata.name}", "a"),
            ("{.items[?(@.spec.tasks[0].replicas==2)].metadata.name}", "a"),
            ("{.items[0].spec}", '{"queue":"q1","tasks":[{"replicas":2}]}'),
            ("{.items[0].missing}", ""),
            ("{.items[9].metadata.name}", ""),
            ("name: {.items[0].metadata.name}, {'\\t'}end", "name: a, \tend"),
            ("{$.kind}", "List"),
            ("{.items[0].metadata.*}", 'a {"team":"nlp"} {"x.io/y":"v"}'),
        ],
    )
    def test_render(self, template: str, expected: str) -> None:
        assert render(template, LIST) == expected

    @pytest.mark.parametrize(
        "template", ["{.items[", "{range .items[*]}{.x}", "{end}", "{.items[x]}", "{.}", "{.a"]
    )
    def test_errors(self, template: str) -> None:
        with pytest.raises(JsonPathError):
            render(template, LIST)


class TestSelectors:
    def test_requirements(self) -> None:
        a, b = A, B
        for text, a_matches, b_matches in [
            ("team=nlp", True, False),
            ("team==nlp", True, False),
            ("team!=nlp", False, True),
            ("team", True, False),
            ("!team", False, True),
            ("team in (nlp, cv)", True, False),
            ("team notin (nlp)", False, True),
            ("team=nlp,!env", True, False),
        ]:
            requirements = parse_selector(text)
            assert matches(requirements, a) is a_matches, text
            assert matches(requirements, b) is b_matches, text

    @pytest.mark.parametrize("text", ["", "team=(", "=x", "a b", "team=nlp,", "in (x)"])
    def test_errors(self, text: str) -> None:
        with pytest.raises(SelectorError):
            parse_selector(text)

    def test_phase_and_queue_filters(self) -> None:
        a, b = A, B
        keep = make_filter(None, "running,PENDING", "q1")
        assert keep(a) and not keep(b)
        assert make_filter(None, None, None)({"kind": "Job", "metadata": {}})


class TestWaitConditions:
    def test_forms(self) -> None:
        a = A
        assert condition("phase=running")(a)
        assert condition("condition=Ready")(a) and not condition("condition=Ready=false")(a)
        assert condition("jsonpath={.status.phase}=Running")(a)
        assert condition("jsonpath='{.spec.queue}'=q1")(a)
        assert not condition("jsonpath={.spec.queue}=q2")(a)
        assert condition("jsonpath={.status.phase}")(a)
        assert not condition("jsonpath={.status.missing}")(a)

    @pytest.mark.parametrize("text", ["ready", "phase=", "condition=Ready=maybe", "jsonpath={.a["])
    def test_errors(self, text: str) -> None:
        with pytest.raises(ValueError):
            condition(text)
