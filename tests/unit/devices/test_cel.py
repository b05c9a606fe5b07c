"""CEL selectors: the DRA environment, errors with positions, the cost limit, the caches."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.devices import selection
from aipaas.devices.cel import COST_LIMIT, CelError, CelEvalError, compile_selector
from aipaas.devices.inventory import Inventory
from tests.unit.devices.devices_builders import gpu, node_slice

D = "gpu.example.com"


def device(**overrides: Any) -> Any:
    attrs = {
        "driverVersion": {"version": "550.54.15"},
        "index": {"int": 3},
        "migEnabled": {"bool": False},
        "other.example.com/rack": {"string": "r1"},
    }
    inventory = Inventory([node_slice("n", [gpu("gpu-0", attrs=attrs, **overrides)])])
    return inventory.by_node["n"][0]


class TestEnvironment:
    @pytest.mark.parametrize(
        ("expression", "want"),
        [
            pytest.param(f'device.driver == "{D}"', True, id="driver"),
            pytest.param(f'device.attributes["{D}"].model == "H100"', True, id="string"),
            pytest.param(f'device.attributes["{D}"].index > 2', True, id="int"),
            pytest.param(f'!device.attributes["{D}"].migEnabled', True, id="bool"),
            pytest.param(
                'device.attributes["other.example.com"].rack == "r1"',
                True,
                id="qualified attribute in its own domain",
            ),
            pytest.param(
                f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) > 0',
                True,
                id="quantity compareTo",
            ),
            pytest.param(
                f'device.capacity["{D}"].memory == quantity("81920Mi")',
                True,
                id="quantity equality by value",
            ),
            pytest.param(
                f'device.capacity["{D}"].memory.isLessThan(quantity("1Ti"))',
                True,
                id="quantity isLessThan",
            ),
            pytest.param(
                f'device.capacity["{D}"].memory.asInteger() == 85899345920',
                True,
                id="quantity asInteger",
            ),
            pytest.param(
                f'device.attributes["{D}"].driverVersion.isGreaterThan(semver("535.0.0"))',
                True,
                id="semver isGreaterThan",
            ),
            pytest.param(
                f'device.attributes["{D}"].driverVersion.major() == 550', True, id="semver major"
            ),
            pytest.param(
                f'device.attributes["{D}"].model.lowerAscii() == "h100"',
                True,
                id="strings extension",
            ),
            pytest.param(
                '"x" in device.attributes["absent.example.com"]',
                False,
                id="absent domain is an empty map",
            ),
            pytest.param(f'has(device.attributes["{D}"].serial)', False, id="has on missing"),
        ],
    )
    def test_evaluates(self, expression: str, want: bool) -> None:
        assert selection.evaluate(expression, device()) is want

    def test_missing_attribute_is_an_error(self) -> None:
        answer = selection.evaluate(f'device.attributes["{D}"].serial == "1"', device())
        assert answer == "no such key: serial"

    def test_non_bool_result_is_an_error(self) -> None:
        with pytest.raises(CelEvalError, match="must evaluate to a bool, got str"):
            compile_selector(f'device.attributes["{D}"].model').evaluate(device().cel_value)


class TestCompileErrors:
    @pytest.mark.parametrize(
        ("expression", "message"),
        [
            pytest.param(
                'device.driver == "a" &&',
                "CEL line 1, column 24: Syntax error",
                id="syntax at the end",
            ),
            pytest.param(
                'device.driver == "a" &&\n  nvidia == 1',
                "CEL line 2, column 3: undeclared reference to 'nvidia'",
                id="undeclared variable on line 2",
            ),
            pytest.param(
                "lookup(device.driver)",
                "CEL line 1, column 1: undeclared reference to function 'lookup'",
                id="unknown function",
            ),
            pytest.param(
                "device.driver.frobnicate()",
                "CEL line 1, column 15: undeclared reference to method 'frobnicate'",
                id="unknown method",
            ),
            pytest.param(
                'device.capacity["a"].m == quantity("12 Gi")',
                "CEL line 1, column 36: quantity\\(\\): invalid quantity '12 Gi'",
                id="bad quantity literal",
            ),
            pytest.param(
                'semver("1.2") == device.attributes["a"].v',
                "CEL line 1, column 8: semver\\(\\): invalid semantic version '1.2'",
                id="bad semver literal",
            ),
            pytest.param("1 + 1", "must evaluate to a bool, got int", id="constant not a bool"),
            pytest.param("", "expression must not be empty", id="empty"),
            pytest.param(
                "true || " * 2000 + "true", "characters long, at most 10240", id="too long"
            ),
        ],
    )
    def test_refuses(self, expression: str, message: str) -> None:
        with pytest.raises(CelError, match=message):
            compile_selector(expression)

    def test_nested_comprehensions_are_over_the_cost_limit(self) -> None:
        expression = "[1, 2, 3].all(x, [1, 2, 3].all(y, [1, 2, 3].all(z, x + y + z > 0)))"
        with pytest.raises(CelError, match=f"exceeds the limit {COST_LIMIT}"):
            compile_selector(expression)

    def test_one_level_of_comprehension_is_fine(self) -> None:
        compiled = compile_selector('device.attributes["a.b"].all(k, k != "x")')
        assert compiled.cost < COST_LIMIT
        assert compiled.paths == (("attributes", "a.b"),)

    def test_compiled_once(self) -> None:
        assert compile_selector('device.driver == "x"') is compile_selector('device.driver == "x"')


class TestCaches:
    def test_answer_is_kept_per_device_and_dropped_with_its_slice(self) -> None:
        inventory = Inventory([node_slice("n", [gpu("gpu-0", model="H100")])])
        expression = f'device.attributes["{D}"].model == "H100"'
        record = inventory.by_node["n"][0]
        assert selection.evaluate(expression, record) is True
        assert record.selector_results == {expression: True}
        inventory.put_slice(node_slice("n", [gpu("gpu-0", model="A100")]))
        fresh = inventory.by_node["n"][0]
        assert fresh is not record and fresh.selector_results == {}
        assert selection.evaluate(expression, fresh) is False

    def test_devices_that_read_the_same_share_one_evaluation(self) -> None:
        devices = [gpu(f"gpu-{i}", attrs={"uuid": {"string": f"GPU-{i}"}}) for i in range(50)]
        inventory = Inventory([node_slice("n", devices)])
        expression = f'device.attributes["{D}"].model == "H100" && device.driver != "zz"'
        calls = 0
        compiled = compile_selector(expression)
        original = compiled.program

        class Counting:
            def execute(self, context: Any) -> Any:
                nonlocal calls
                calls += 1
                return original.execute(context)

        object.__setattr__(compiled, "program", Counting())
        try:
            selected = selection.matching(compiled, inventory.by_node["n"])
        finally:
            object.__setattr__(compiled, "program", original)
        assert len(selected) == 50
        assert calls <= 1  # one distinct (driver, model): at most one library call


class TestSliceRemoval:
    def test_removed_slice_takes_its_devices_and_counters(self) -> None:
        published = node_slice("n", [gpu("gpu-0")], counters={"set": {"memory": "80Gi"}})
        inventory = Inventory([published])
        assert inventory.nodes == ["n"]
        inventory.remove_slice(published.metadata.name or "")
        assert inventory.nodes == [] and inventory.by_id == {} and inventory.counter_sets == {}
