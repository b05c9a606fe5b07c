"""CEL selectors are type-checked when they are compiled (so when an object is applied).

The declarations are Kubernetes DRA's: device.driver string, device.attributes map of domain to
map of name to an attribute (bool, int, string or semver), device.capacity map of domain to map
of name to quantity, device.allowMultipleAllocations bool.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.devices import selection
from aipaas.devices.cel import CelError, compile_selector
from aipaas.devices.cel_types import MAX_NESTING
from aipaas.devices.inventory import Inventory
from tests.unit.devices.devices_builders import gpu, node_slice

D = "gpu.nvidia.com"
ATTR = f'device.attributes["{D}"]'
CAP = f'device.capacity["{D}"]'


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param('device.driver == "gpu.nvidia.com"', id="string equality"),
        pytest.param(f'{ATTR}.model == "H100"', id="attribute against a string"),
        pytest.param(f"{ATTR}.index >= 2", id="attribute ordered against an int"),
        pytest.param(f"!{ATTR}.migEnabled", id="attribute negated as a bool"),
        pytest.param(f"{ATTR}.migEnabled", id="an attribute alone may be a bool"),
        pytest.param(f'{CAP}.memory.compareTo(quantity("40Gi")) > 0', id="quantity compareTo"),
        pytest.param(f'{CAP}.memory == quantity("80Gi")', id="quantity equality"),
        pytest.param(f'{CAP}.memory.add(1).isGreaterThan(quantity("1"))', id="quantity add int"),
        pytest.param(f"{CAP}.memory.asInteger() > 1024", id="quantity asInteger"),
        pytest.param(f'{ATTR}.driverVersion.isGreaterThan(semver("535.0.0"))', id="semver"),
        pytest.param(f"{ATTR}.driverVersion.major() == 550", id="semver major"),
        pytest.param(f'{ATTR}.model.lowerAscii().startsWith("h1")', id="string methods"),
        pytest.param(f'{ATTR}["model"].startsWith("A")', id="attribute by index"),
        pytest.param(f"has({ATTR}.serial)", id="has on an attribute"),
        pytest.param('"x" in device.attributes["absent.example.com"]', id="in on a domain map"),
        pytest.param('device.attributes.exists(d, d == "other.example.com")', id="exists keys"),
        pytest.param(f'{ATTR}.all(k, k != "rack")', id="all over a domain"),
        pytest.param('device.driver in ["a.example.com", "b.example.com"]', id="in a list"),
        pytest.param("device.allowMultipleAllocations", id="allowMultipleAllocations"),
        pytest.param('size(device.driver) > 2 && device.driver.split(".").size() == 3', id="size"),
        pytest.param('true ? device.driver == "a" : false', id="ternary"),
        pytest.param("[1, 2].map(x, x * 2).exists(y, y > 3)", id="map then exists"),
        pytest.param("-1 < 1.0 && 1u == 1", id="numbers compare across kinds"),
        pytest.param("dyn(device.driver) == 1", id="dyn opts out, as in Kubernetes"),
        pytest.param(f"{ATTR}.rack == null || true", id="null compares with an attribute"),
    ],
)
def test_accepts(expression: str) -> None:
    assert compile_selector(expression).expression == expression


@pytest.mark.parametrize(
    ("expression", "at", "reason"),
    [
        pytest.param("device.driver", None, "must evaluate to a bool, got string", id="non-bool"),
        pytest.param(
            f"{CAP}.memory", None, "must evaluate to a bool, got quantity", id="non-bool quantity"
        ),
        pytest.param(
            '"a" + "b"', None, "must evaluate to a bool, got string", id="non-bool constant"
        ),
        pytest.param(
            'device.drivr == "a"', "drivr", "undefined field 'drivr' of device", id="unknown field"
        ),
        pytest.param(
            "has(device.drivr)", "drivr", "undefined field 'drivr'", id="unknown field in has"
        ),
        pytest.param(
            f"{ATTR}.model.foo == 1",
            "foo",
            "cannot select field 'foo': a value of type attribute",
            id="field of an attribute",
        ),
        pytest.param(
            f"{CAP}.memory.value > 0",
            "value",
            "cannot select field 'value': a value of type quantity",
            id="field of a quantity",
        ),
        pytest.param(
            "device.driver == 1",
            "==",
            r"no matching overload for '==' applied to \(string, int\)",
            id="string == int",
        ),
        pytest.param(
            f'{CAP}.memory > "a"',
            ">",
            r"'>' applied to \(quantity, string\); compare quantities .* with compareTo",
            id="quantity > string",
        ),
        pytest.param(
            f"{CAP}.memory > 5", ">", r"'>' applied to \(quantity, int\)", id="quantity > int"
        ),
        pytest.param(
            f'{ATTR}.memory == quantity("1Gi")',
            "==",
            r"'==' applied to \(attribute \(bool, int, string or semver\), quantity\)",
            id="attribute is never a quantity",
        ),
        pytest.param(
            "device.driver > 1", ">", r"'>' applied to \(string, int\)", id="string > int"
        ),
        pytest.param(
            'device.driver && device.driver == "a"',
            "&&",
            "operands of '&&' must be bool, got string",
            id="string in &&",
        ),
        pytest.param("!device.driver", None, "operand of '!' must be a bool", id="not of a string"),
        pytest.param(
            "1 in device.attributes",
            "in",
            "'in' looks for int among keys of type string",
            id="int in a string-keyed map",
        ),
        pytest.param('"a" in device.driver', "in", "'in' needs a list or a map", id="in a string"),
        pytest.param(
            "device.attributes[1].x == 1",
            "1]",
            "a key of this map is a string, got int",
            id="map key type",
        ),
        pytest.param(
            'device.driver[0] == "g"',
            "0]",
            "cannot index a value of type string",
            id="index a string",
        ),
        pytest.param(
            f'{CAP}.memory.compareTo(semver("1.0.0")) == 0',
            "compareTo",
            r"compareTo applied to \(quantity, semver\)",
            id="quantity compareTo semver",
        ),
        pytest.param(
            f"{ATTR}.version.asInteger() == 1",
            "asInteger",
            r"asInteger applied to \(attribute",
            id="attribute is never a quantity (method)",
        ),
        pytest.param(
            f"{ATTR}.all(k, k)",
            "all",
            r"the condition of all\(\) must be a bool, got string",
            id="macro condition",
        ),
        pytest.param(
            "device.driver.exists(x, true)",
            "exists",
            r"exists\(\) needs a list or a map",
            id="macro on a string",
        ),
        pytest.param(
            'quantity(1) == quantity("1")',
            None,
            r"quantity applied to \(int\)",
            id="quantity of an int",
        ),
        pytest.param("size(1) == 1", None, r"size applied to \(int\)", id="size of an int"),
        pytest.param("1 + 1.0 == 2.0", "+", r"'\+' applied to \(int, double\)", id="int + double"),
        pytest.param(
            f'{CAP}.memory + 1 == quantity("2")',
            "+",
            r"'\+' applied to \(quantity, int\)",
            id="quantity arithmetic",
        ),
        pytest.param(
            "true ? 1 : 2", None, "must evaluate to a bool, got int", id="ternary of ints"
        ),
        pytest.param(
            "device.allowMultipleAllocations ? device.driver : 1 == 1",
            ":",
            r"the branches of '\?:' differ in type: string and bool",
            id="ternary branches",
        ),
        pytest.param(
            "device.driver ? true : false",
            None,
            r"the condition of '\?:' must be a bool",
            id="ternary condition",
        ),
        pytest.param(
            'device.driver == "a" &&\n  device.capacity["d"].m > 1',
            ">",
            r"'>' applied to \(quantity, int\)",
            id="position on line 2",
        ),
    ],
)
def test_refuses_with_position_and_reason(expression: str, at: str | None, reason: str) -> None:
    """``at`` is the text the error points at (None: the start of the expression)."""
    with pytest.raises(CelError, match=reason) as error:
        compile_selector(expression)
    offset = expression.index(at) if at is not None else 0
    line = expression.count("\n", 0, offset) + 1
    column = offset - (expression.rfind("\n", 0, offset) + 1) + 1
    assert (error.value.line, error.value.column) == (line, column), str(error.value)


def test_nesting_is_bounded_without_recursion_errors() -> None:
    shallow = "(" * 40 + "true" + ")" * 40
    assert compile_selector(shallow).expression == shallow
    # The library refuses deep nesting itself; the checker never recurses deeper than its
    # bound, whatever reaches it.
    with pytest.raises(CelError):
        compile_selector("(" * (MAX_NESTING + 20) + "true" + ")" * (MAX_NESTING + 20))


def test_long_flat_chains_are_checked_without_recursion() -> None:
    expression = " || ".join([f'device.driver == "d{i}"' for i in range(300)])
    assert compile_selector(expression).paths == (("driver",),)
    with pytest.raises(CelError, match="'==' applied to \\(string, int\\)"):
        compile_selector(expression + " || device.driver == 7")


def test_allow_multiple_allocations_evaluates() -> None:
    inventory = Inventory(
        [node_slice("n", [gpu("gpu-0", multiple=True), gpu("gpu-1", multiple=False)])]
    )
    devices = inventory.by_node["n"]
    shared = selection.matching(
        'device.allowMultipleAllocations && device.attributes["gpu.example.com"].model == "H100"',
        devices,
    )
    assert [d.name for d in shared] == ["gpu-0"]


_ATOMS = st.sampled_from(
    [
        "device.driver",
        "device.drivr",
        "device.allowMultipleAllocations",
        f"{ATTR}.model",
        f"{ATTR}.index",
        f"{ATTR}.driverVersion",
        f'{ATTR}["model"]',
        f"{CAP}.memory",
        "device.attributes",
        'quantity("1Gi")',
        'semver("1.2.3")',
        '"H100"',
        "1",
        "2u",
        "1.5",
        "true",
        "null",
        "[1, 2]",
        '{"a": 1}',
    ]
)


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(
        inner,
        st.sampled_from(["==", "!=", "<", ">=", "&&", "||", "+", "-", "*", "in"]),
        inner,
    ).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    unary = st.tuples(st.sampled_from(["!", "-"]), inner).map(lambda t: f"{t[0]}{t[1]}")
    method = st.tuples(
        inner,
        st.sampled_from(["compareTo", "isGreaterThan", "lowerAscii", "size", "major", "foo"]),
        st.lists(inner, max_size=1),
    ).map(lambda t: f"{t[0]}.{t[1]}({', '.join(t[2])})")
    macro = st.tuples(inner, st.sampled_from(["all", "exists", "filter", "map"]), inner).map(
        lambda t: f"{t[0]}.{t[1]}(x, {t[2]})"
    )
    other = st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})")
    return binary | unary | method | macro | other | inner.map(lambda e: f"has({e}.x)")


@settings(max_examples=300, deadline=None)
@given(st.recursive(_ATOMS, _grow, max_leaves=8))
def test_any_expression_is_accepted_or_refused_cleanly(expression: str) -> None:
    """The checker never crashes: an expression compiles, or is a CelError with a position;
    one that compiles evaluates to a bool or an evaluation error, never anything else."""
    try:
        compiled = compile_selector(expression)
    except CelError as error:
        assert error.reason
        return
    device = Inventory([node_slice("n", [gpu("gpu-0")])]).by_node["n"][0]
    answer = selection.evaluate(compiled, device)
    assert isinstance(answer, bool | str)
