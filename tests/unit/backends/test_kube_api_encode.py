"""Request bodies go to the API server as Go encodes JSON: the server keeps an opaque device
configuration's parameters as the bytes it was sent and compares them with the object encoded
again on each later update, so any other form made every later patch of such a claim fail
("spec: field is immutable"; seen on kube-apiserver 1.37.2)."""

from __future__ import annotations

import json

from aipaas.backends.kubernetes.api import encode


def test_compact_as_go_writes_it() -> None:
    body = {"spec": {"parameters": {"sharing": {"strategy": "TimeSlicing"}, "n": [1, 2.5]}}}
    assert (
        encode(body)
        == b'{"spec":{"parameters":{"sharing":{"strategy":"TimeSlicing"},"n":[1,2.5]}}}'
    )


def test_html_characters_escaped_other_text_kept_as_utf8() -> None:
    text = 'a<b>&c \u00e9 \u2028 "q"'
    out = encode({"x": text})
    assert out == '{"x":"a\\u003cb\\u003e\\u0026c \u00e9 \\u2028 \\"q\\""}'.encode()
    assert json.loads(out) == {"x": text}  # the same document
