"""A JSON Schema checker for what the API's OpenAPI document uses of JSON Schema 2020-12:
``$ref`` to its components, ``type`` (one or a list), ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``, ``anyOf``, ``allOf`` and the numeric bounds.
A keyword it does not know is an error, so that a schema cannot say more than is checked."""

from __future__ import annotations

from typing import Any

TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
ANNOTATIONS = {"title", "description", "default", "format", "examples"}
KNOWN = ANNOTATIONS | {"$ref", "type", "properties", "required", "additionalProperties",
                       "items", "enum", "anyOf", "allOf", "minimum", "maximum",
                       "exclusiveMinimum", "exclusiveMaximum"}  # fmt: skip


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, TYPES[kind])


def problems(
    value: Any, schema: dict[str, Any], document: dict[str, Any], at: str = "$"
) -> list[str]:
    """Where ``value`` breaks ``schema`` (``$ref`` resolved in ``document``); [] if nowhere."""
    unknown = set(schema) - KNOWN
    if unknown:
        return [f"{at}: schema keywords not checked here: {sorted(unknown)}"]
    if "$ref" in schema:
        target: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return problems(value, target, document, at)
    found: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, kind) for kind in kinds):
            return [f"{at}: {value!r:.80} is not {' or '.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{at}: {value!r} is not one of {schema['enum']}")
    if _is(value, "number"):
        for key, holds in (("minimum", value >= schema.get("minimum", value)),
                           ("maximum", value <= schema.get("maximum", value)),
                           ("exclusiveMinimum", "exclusiveMinimum" not in schema
                            or value > schema["exclusiveMinimum"]),
                           ("exclusiveMaximum", "exclusiveMaximum" not in schema
                            or value < schema["exclusiveMaximum"])):  # fmt: skip
            if not holds:
                found.append(f"{at}: {value} breaks {key} {schema[key]}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                found.append(f"{at}: {name} is missing")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                found += problems(item, properties[name], document, f"{at}.{name}")
            elif extra is False:
                found.append(f"{at}: {name} is not allowed")
            elif isinstance(extra, dict):
                found += problems(item, extra, document, f"{at}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += problems(item, schema["items"], document, f"{at}[{i}]")
    for sub in schema.get("allOf", []):
        found += problems(value, sub, document, at)
    if "anyOf" in schema and all(problems(value, s, document, at) for s in schema["anyOf"]):
        found.append(f"{at}: {value!r:.80} matches none of anyOf")
    return found
