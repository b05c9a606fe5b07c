"""The bounded parser: what the YAML scan and the JSON checks refuse (naming the path), what
they keep, and that no text up to the size limit can crash the interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aipaas.api.meta import check_name
from aipaas.api.parsing import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_NUMBER_CHARS,
    check_json_depth,
    load_documents,
    load_json,
)
from aipaas.api.registry import load_objects
from aipaas.errors import InvalidObject, PayloadTooLarge

BOMB = "\n".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x, x]",
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]",
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]",
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]",
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]",
        "f: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]",
    ]
)


def _refusal(text: str) -> tuple[str, str]:
    with pytest.raises(InvalidObject) as caught:
        load_documents(text)
    (field,) = caught.value.fields
    return field.path, field.reason


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        pytest.param("a: !!binary aGVsbG8=\n", "a", "tag:yaml.org,2002:binary", id="binary"),
        pytest.param(
            "a: !!python/object/apply:os.system [ls]\n", "a", "python/object", id="python tag"
        ),
        pytest.param("a: !custom x\n", "a", "'!custom' is not accepted", id="custom tag"),
        pytest.param("a: !!timestamp 2001-12-14\n", "a", "timestamp", id="explicit timestamp"),
        pytest.param("a: !!set {x: null}\n", "a", "set", id="set"),
        pytest.param("? [a, b]\n: 1\n", "", "a key must be a plain value", id="list key"),
        pytest.param("? {a: 1}\n: 1\n", "", "a key must be a plain value", id="map key"),
        pytest.param("x: &k [a]\ny: {*k : 1}\n", "y", "a key must be a plain", id="alias key"),
        pytest.param("a: " + "9" * 5000 + "\n", "a", "a number of more than", id="huge int"),
        pytest.param("a: -" + "1" * 4400 + "\n", "a", "a number of more than", id="huge negative"),
        pytest.param("a: 1" + ":10" * 20000 + "\n", "a", "a number of more than", id="base 60"),
        pytest.param(
            "spec:\n  tasks:\n  - name: x\n    command: !!binary aGk=\n",
            "spec.tasks[0].command",
            "binary",
            id="path of a nested tag",
        ),
        pytest.param("[" * 40 + "]" * 40, "[0]" * (MAX_DEPTH + 1), "nested deeper", id="flow"),
        pytest.param(
            "".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v\n",
            ".".join(f"k{i}" for i in range(MAX_DEPTH)),
            "nested deeper",
            id="block",
        ),
        pytest.param(
            "a: &a " + "[" * 20 + "]" * 20 + "\nb: " + "[" * 20 + "*a" + "]" * 20 + "\n",
            "b" + "[0]" * 20,
            "nested deeper",
            id="deep through an alias",
        ),
        pytest.param(BOMB, "e[7]", "expands to more than", id="billion laughs"),
        pytest.param("a: *nowhere\n", "a", "unknown alias *nowhere", id="unknown alias"),
        pytest.param("a: .nan\n", "a", "not a finite number", id="nan"),
        pytest.param("a: -.inf\n", "a", "not a finite number", id="infinity"),
        pytest.param("a: 1\na: 2\n", "a", "'a' given twice", id="duplicate key"),
        pytest.param("m: {k: 1, k: 2}\n", "m.k", "'k' given twice", id="nested duplicate"),
        pytest.param("a: 1\n'a': 2\n", "", "duplicate key 'a'", id="duplicate by value"),
        pytest.param("a: [\n", "", "not valid YAML", id="unclosed"),
        pytest.param("---\n" * 1001, "", "more than 1000 documents", id="documents"),
    ],
)
def test_yaml_refusals_name_the_path(text: str, path: str, reason: str) -> None:
    got_path, got_reason = _refusal(text)
    assert got_path == path
    assert reason in got_reason


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("a: 2001-13-45\n", {"a": "2001-13-45"}, id="invalid date stays text"),
        pytest.param("a: 2001-12-14\n", {"a": "2001-12-14"}, id="date stays text"),
        pytest.param("a: 2001-12-14t21:59:43.10-05:00\n", {"a": "2001-12-14t21:59:43.10-05:00"}),
        pytest.param("a: !!str 12\n", {"a": "12"}, id="explicit str"),
        pytest.param("a: !!map {b: 1}\n", {"a": {"b": 1}}, id="explicit map"),
        pytest.param("b: &b {x: 1}\nc: {<<: *b, y: 2}\n", {"b": {"x": 1}, "c": {"x": 1, "y": 2}}),
        pytest.param("a: " + "9" * MAX_NUMBER_CHARS + "\n", {"a": int("9" * MAX_NUMBER_CHARS)}),
        pytest.param("a: '" + "9" * 5000 + "'\n", {"a": "9" * 5000}, id="long quoted digits"),
        pytest.param("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), None, id="at the limit"),
    ],
)
def test_yaml_kept(text: str, want: object) -> None:
    (document,) = load_documents(text)
    if want is not None:
        assert document == want


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        pytest.param('{"a": 1, "a": 2}', "a", "key given twice", id="duplicate"),
        pytest.param('{"a": {"b": 1, "b": 1}}', "a.b", "key given twice", id="nested duplicate"),
        pytest.param('{"a": NaN}', "a", "NaN is not a number", id="NaN"),
        pytest.param('{"a": -Infinity}', "a", "-Infinity is not a number", id="infinity"),
        pytest.param('{"a": 1e400}', "a", "out of range", id="overflow"),
        pytest.param('{"a": ' + "9" * 5000 + "}", "a", "more than 1000 characters", id="huge int"),
        pytest.param(
            '{"a":' + "[" * 5000 + "]" * 5000 + "}",
            "a" + "[0]" * MAX_DEPTH,
            "nested deeper",
            id="deep",
        ),
        pytest.param(
            '{"a": [1, {"b": [' + "[" * 40 + "]" * 40 + "]}]}",
            "a[1].b" + "[0]" * (MAX_DEPTH - 2),
            "deeper",
            id="deep b",
        ),
        pytest.param(
            "{a: " * 40 + "}" * 40, ".".join("a" * (MAX_DEPTH + 1)), "deeper", id="bare keys"
        ),
        pytest.param('{"a": [1, {"b": NaN}]}', "a[1].b", "NaN is not", id="NaN in a list"),
        pytest.param('{"a": [}', "", "not valid JSON", id="unbalanced"),
        pytest.param('{"a": 1', "", "not valid JSON", id="truncated"),
    ],
)
def test_json_refusals(text: str, path: str, reason: str) -> None:
    got_path, got_reason = _refusal(text)
    assert got_path == path
    assert reason in got_reason


def test_json_brackets_in_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"a": "[" * 500 + "{" * 500, "b": ["]" * 50]})
    check_json_depth(text)
    assert load_json(text)["a"].startswith("[[")


def test_json_depth_limit_is_yamls() -> None:
    """The root is level 0, as in the YAML scan: MAX_DEPTH levels below it load."""
    at_limit = '{"a":' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    over = '{"a":' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}"
    assert load_json(at_limit)
    assert load_documents("a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(InvalidObject):
        load_json(over)
    with pytest.raises(InvalidObject):
        load_documents("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_over_the_size_limit() -> None:
    with pytest.raises(PayloadTooLarge):
        load_documents("a" * (MAX_DOCUMENT_BYTES + 1))


_CRASHERS = {
    "flow-60k": "'[' * 30_000 + ']' * 30_000",
    "flow-1M": "'[' * (MAX // 2) + ']' * (MAX // 2)",
    "flow-open": "'[' * MAX",
    "map-flow": "'{a: ' * (MAX // 4)",
    "block-seq": "''.join('  ' * i + '-\\n' for i in range(900))",
    "json-1M": "'{\"a\":' + '[' * (MAX // 2 - 10) + ']' * (MAX // 2 - 10) + '}'",
}


@pytest.mark.parametrize("expression", _CRASHERS.values(), ids=_CRASHERS.keys())
def test_no_text_up_to_the_limit_crashes_the_interpreter(expression: str) -> None:
    """Run apart, because a crash here would be a segmentation fault (it was, at 60 KB)."""
    program = (
        "from aipaas.api.parsing import MAX_DOCUMENT_BYTES as MAX, load_documents\n"
        "from aipaas.errors import InvalidObject\n"
        f"text = {expression}\n"
        "assert len(text) <= MAX, len(text)\n"
        "try:\n"
        "    load_documents(text)\n"
        "except InvalidObject as err:\n"
        "    print('refused:', err.fields[0].reason)\n"
    )
    # A hang is caught by the timeout (generous: a loaded machine starts Python slowly).
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: " in result.stdout


@pytest.mark.parametrize("name", ["tn\n", "tn\r", " tn", "tn ", "t\x00n", "tn\n\n", "Tn"])
def test_names_are_full_matches(name: str) -> None:
    with pytest.raises(ValueError):
        check_name(name)


@pytest.mark.parametrize(
    "manifest",
    [
        'apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: "tn\\n"}\n',
        'apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: tn, labels: {"a\\n": b}}\n',
        'apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: tn, labels: {a: "b\\n"}}\n',
        'apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: "gpu\\n"}\nspec: {}\n',
    ],
    ids=["tenant name", "label key", "label value", "DeviceClass name"],
)
def test_trailing_newlines_are_refused_with_the_field(manifest: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        load_objects(manifest)
    assert any(f.path.startswith("metadata") for f in caught.value.fields), caught.value.fields


def test_yaml_in_flow_style_is_read_as_yaml() -> None:
    """It starts with ``{`` as JSON does, and is valid YAML all the same."""
    text = "{apiVersion: aipaas/v1, kind: Queue, metadata: {name: q, tenant: acme}}"
    assert load_documents(text) == [
        {"apiVersion": "aipaas/v1", "kind": "Queue", "metadata": {"name": "q", "tenant": "acme"}}
    ]


def test_a_text_neither_json_nor_yaml_gets_jsons_complaint() -> None:
    with pytest.raises(InvalidObject, match="not valid JSON"):
        load_documents('{"apiVersion": "aipaas/v1", "kind"')


def test_json_nested_too_deep_with_string_values_names_its_path() -> None:
    value: object = "x"
    for _ in range(40):
        value = {"a": value}
    with pytest.raises(InvalidObject) as refused:
        load_documents(json.dumps({"metadata": {"labels": value}}))
    assert refused.value.fields[0].path.startswith("metadata.labels.a.a")
