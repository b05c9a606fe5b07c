"""The core's packages, the controller and the scheduler, each import their own modules without
a circle (type-only imports included: a module under ``if TYPE_CHECKING`` still names what it
depends on), and no function of the controller takes the Controller: a step gets values and
hands values forward (issue 25). Read from the import graph grimp builds (import-linter's)
and from the modules' signatures, so a new circle or a new ``ctl`` parameter fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

import grimp
import pytest

import aipaas.controller
from aipaas.controller.cycle import Controller

PACKAGE = "aipaas.controller"


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_circles_are_found_in_a_graph_with_one() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("aipaas", cache_dir=None)


@pytest.mark.parametrize("package", [PACKAGE, "aipaas.scheduler"])
def test_no_import_circle_inside_the_package(graph: grimp.ImportGraph, package: str) -> None:
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    assert len(modules) > 20  # the package's modules, not an empty graph
    assert circles(edges) == []


def controller_modules() -> Iterator[ModuleType]:
    for info in pkgutil.iter_modules(aipaas.controller.__path__, PACKAGE + "."):
        yield importlib.import_module(info.name)


def takes_the_controller(function: object) -> bool:
    """A parameter named ``ctl`` or annotated with the Controller (annotations are strings
    here: the modules use postponed evaluation)."""
    assert callable(function)
    if "ctl" in inspect.signature(function).parameters:
        return True
    hints = inspect.get_annotations(function)
    return any(str(h) == "Controller" or str(h).endswith(".Controller") for h in hints.values())


def test_takes_the_controller_sees_an_annotation_and_a_name() -> None:
    def annotated(run: Controller) -> None: ...
    def named(ctl: object) -> None: ...
    def plain(controller_name: str) -> None: ...

    assert takes_the_controller(annotated) and takes_the_controller(named)
    assert not takes_the_controller(plain)


def test_no_function_of_the_controller_takes_the_controller() -> None:
    takers = [
        f"{module.__name__}.{name}"
        for module in controller_modules()
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__ and takes_the_controller(function)
    ]
    assert takers == []
