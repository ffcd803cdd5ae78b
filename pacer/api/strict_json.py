"""Strict JSON at the HTTP API's edge: plain RFC 8259 objects in, no NaN or Infinity out.

In: a request body must be UTF-8 JSON holding one object, nested at most ``MAX_DEPTH`` deep,
integers within 64 bits, no ``NaN``/``Infinity`` literals (Python's json accepts them) and no
key twice in one object (parsers disagree on which one wins). Anything else raises
``BadInputError``: 400 for a body that is not such JSON at all, 422 naming the field for a
number that overflows a float (``1e400``).

Out: ``dumps`` writes non-finite floats as ``null`` (strict parsers refuse ``Infinity``) and
refuses to write anything else that is not JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32
MAX_INT_DIGITS = 19  # 2**63 has 19 digits


class BadInputError(Exception):
    """A request that breaks a rule: ``field`` and the rule, for a 4xx answer."""

    def __init__(self, field: str | None, rule: str, status: int = 422) -> None:
        super().__init__(rule)
        self.field = field
        self.rule = rule
        self.status = status


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def _integer(text: str) -> int:
    # Checked before int(): a 5,000-digit literal would otherwise cost a quadratic conversion
    # (or trip Python's int-string limit) before anything could refuse it.
    if len(text.lstrip("-")) > MAX_INT_DIGITS or not -(2**63) <= (value := int(text)) < 2**63:
        raise ValueError(f"integer {text[:24]}{'…' if len(text) > 24 else ''} is beyond 64 bits")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key[:64]!r} appears twice in one object")
        out[key] = value
    return out


def parse_object(raw: bytes) -> dict[str, Any]:
    """The JSON object in a request body; BadInputError for anything else.

    >>> parse_object(b'{"partitions": 4}')
    {'partitions': 4}
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        rule = f"body is not UTF-8: {exc.reason} at byte {exc.start}"
        raise BadInputError(None, rule, 400) from None
    try:
        body = json.loads(
            text or "null", parse_constant=_constant, parse_int=_integer, object_pairs_hook=_object
        )
    except RecursionError:
        raise BadInputError(None, f"body nests deeper than {MAX_DEPTH} levels", 400) from None
    except ValueError as exc:  # json.JSONDecodeError, and what the hooks above raise
        raise BadInputError(None, f"body is not valid JSON: {exc}", 400) from None
    if not isinstance(body, dict):
        raise BadInputError(None, "body must be a JSON object", 400)
    _check(body, "", 1)
    return body


def _check(value: Any, path: str, depth: int) -> None:
    """Depth and finiteness of everything in ``value`` (``path`` names it for the error)."""
    if isinstance(value, float) and not math.isfinite(value):
        rule = f"{path}: must be a finite number, got one beyond a float's range"
        raise BadInputError(path, rule)
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            raise BadInputError(None, f"body nests deeper than {MAX_DEPTH} levels", 400)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            name = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
            _check(item, name, depth + 1)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (inf, nan) replaced by None, tuples as lists.

    >>> finite({"rate_cap_per_s": float("inf"), "terms": (1.0, float("nan"))})
    {'rate_cap_per_s': None, 'terms': [1.0, None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any) -> bytes:
    """``value`` as strict JSON (UTF-8): non-finite floats as null, never NaN or Infinity."""
    return json.dumps(finite(value), allow_nan=False).encode()
