from __future__ import annotations

import json
import math
from typing import Any

import pytest

from pacer.api.strict_json import MAX_DEPTH, BadInputError, dumps, finite, parse_object


@pytest.mark.parametrize(
    ("raw", "status", "field", "rule"),
    [
        (b'{"a": NaN}', 400, None, "NaN is not JSON"),
        (b'{"a": -Infinity}', 400, None, "-Infinity is not JSON"),
        (b'{"a": 1e400}', 422, "a", "a: must be a finite number"),
        (b'{"a": {"b": [1, -1e999]}}', 422, "a.b[1]", "a.b[1]: must be a finite number"),
        (b'{"a": ' + b"1" * 5000 + b"}", 400, None, "integer 111111111111111111111111… is"),
        (b'{"a": -9223372036854775809}', 400, None, "beyond 64 bits"),
        (b"[" * 100_000 + b"]" * 100_000, 400, None, "nests deeper"),
        (b'{"a": ' + b"[" * (MAX_DEPTH) + b"]" * (MAX_DEPTH) + b"}", 400, None, "nests deeper"),
        (b'{"a": 1, "a": 2}', 400, None, "key 'a' appears twice"),
        (b"\xff", 400, None, "body is not UTF-8: invalid start byte at byte 0"),
        (b"", 400, None, "body must be a JSON object"),
        (b"7", 400, None, "body must be a JSON object"),
    ],
    ids=["nan", "minus-infinity", "overflow", "overflow-nested", "long-int", "int-64",
         "deep", "just-too-deep", "duplicate", "utf8", "empty", "number"],
)  # fmt: skip
def test_parse_object_refuses(raw: bytes, status: int, field: str | None, rule: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_object(raw)
    assert (info.value.status, info.value.field) == (status, field)
    assert rule in info.value.rule


def test_parse_object_takes_plain_json() -> None:
    raw = b'{"a": [1, 2.5, {"b": null}], "c": -9223372036854775808, "d": "\\u00e9"}'
    assert parse_object(raw) == {"a": [1, 2.5, {"b": None}], "c": -(2**63), "d": "é"}
    nested: Any = {}
    for _ in range(MAX_DEPTH - 1):
        nested = {"n": nested}
    assert parse_object(json.dumps(nested).encode()) == nested


def test_dumps_writes_non_finite_numbers_as_null() -> None:
    value = {"cap": math.inf, "terms": (1.5, -math.inf, math.nan), "n": 3, "s": "x"}
    assert finite(value) == {"cap": None, "terms": [1.5, None, None], "n": 3, "s": "x"}
    assert json.loads(dumps(value)) == {"cap": None, "terms": [1.5, None, None], "n": 3, "s": "x"}
    with pytest.raises(TypeError):
        dumps({"what": object()})
