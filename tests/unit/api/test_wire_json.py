"""``to_wire_json`` (pydantic's serialiser, used for apply answers) says what ``to_wire`` says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aipaas.api.registry import load_documents, load_objects
from aipaas.errors import InvalidObject

EXAMPLES = Path(__file__).parents[3] / "examples"
UNUSUAL = (Path(__file__).parents[2] / "data" / "manifests" / "unusual.yaml").read_text()


def _manifests() -> list[str]:
    texts = [UNUSUAL]
    texts += [p.read_text() for p in sorted(EXAMPLES.rglob("*.yaml"))]
    return texts


@pytest.mark.parametrize("text", _manifests())
def test_the_json_text_is_the_wire_form(text: str) -> None:
    objects = load_objects(text)
    assert objects
    for obj in objects:
        assert json.loads(obj.to_wire_json()) == obj.to_wire()


def test_json_nested_deeper_than_the_limit_is_refused_and_shallow_json_is_not_walked() -> None:
    deep = '{"a":' * 40 + "1" + "}" * 40
    with pytest.raises(InvalidObject, match="nested deeper"):
        load_documents(deep)
    braces_in_strings = json.dumps({"kind": "Job", "note": "{" * 50})  # deep-looking, flat
    assert load_documents(braces_in_strings)[0]["note"] == "{" * 50
