"""``/openapi.json``: every route the application registers is in it, it holds together as an
OpenAPI 3.1 document, and what the API answers matches the schemas it documents."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pacer.api import build_app
from pacer.api.openapi import document
from pacer.api.routes import ROUTES
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.json_schema import KNOWN, TYPES, problems
from tests.servers import JSON, call, settings_for, until_done

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
LOCATIONS = {"query", "header", "path", "cookie"}


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def schemas_in(node: Any) -> list[dict[str, Any]]:
    """Every JSON schema of the document ``node``: each ``schema`` value, each component
    schema, and the schemas nested in them."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "schema":
                found += nested(value)
            elif key == "schemas":
                found += [s for schema in value.values() for s in nested(schema)]
            else:
                found += schemas_in(value)
    elif isinstance(node, list):
        found += [s for value in node for s in schemas_in(value)]
    return found


def nested(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """``schema`` and the schemas in its properties, items, anyOf and allOf."""
    inner = [*schema.get("properties", {}).values(), *schema.get("anyOf", []),
             *schema.get("allOf", [])]  # fmt: skip
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            inner.append(schema[key])
    return [schema, *(s for sub in inner for s in nested(sub))]


def test_every_registered_route_is_documented(tmp_path: Any) -> None:
    app = build_app(Service.build(settings_for(tmp_path), CollectorRegistry()))
    paths = document()["paths"]
    registered = set()
    for route in app.router.routes():
        resource = route.resource
        assert resource is not None
        registered.add((route.method.lower(), resource.canonical))
    for method, path in registered:
        documented = "get" if method == "head" else method  # aiohttp's HEAD beside each GET
        assert documented in paths.get(path, {}), f"{method.upper()} {path} is not documented"
    assert {(m, p) for p, ops in paths.items() for m in ops} <= registered
    assert len(registered) == len(ROUTES) + sum(r.method == "GET" for r in ROUTES)


def test_the_document_holds_together() -> None:
    doc = document()
    assert re.fullmatch(r"3\.1\.\d+", doc["openapi"])
    assert isinstance(doc["info"]["title"], str)
    assert isinstance(doc["info"]["version"], str)
    operation_ids = []
    for path, operations in doc["paths"].items():
        assert path.startswith("/"), path
        templated = set(re.findall(r"\{(\w+)\}", path))
        for method, op in operations.items():
            assert method in METHODS, (path, method)
            operation_ids.append(op["operationId"])
            assert op["summary"].strip(), (path, method)
            params = op.get("parameters", [])
            for param in params:
                assert param["in"] in LOCATIONS, param
                assert isinstance(param["name"], str)
                assert "schema" in param, param
                if param["in"] == "path":
                    assert param["required"] is True, param
            declared = {p["name"] for p in params if p["in"] == "path"}
            assert declared == templated, (path, method)
            assert len({(p["name"], p["in"]) for p in params}) == len(params), (path, method)
            assert op["responses"], (path, method)
            for status, response in op["responses"].items():
                assert re.fullmatch(r"[1-5]\d\d", status), (path, method, status)
                assert response["description"].strip(), (path, method, status)
                for media in response.get("content", {}).values():
                    assert "schema" in media
            body = op.get("requestBody")
            if body is not None:
                assert body["content"]["application/json"]["schema"]
            for requirement in op.get("security", []):
                assert set(requirement) <= set(doc["components"]["securitySchemes"])
    assert len(operation_ids) == len(set(operation_ids)), "operationIds repeat"
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in doc["components"]["schemas"], ref
    for schema in schemas_in(doc):
        assert set(schema) <= KNOWN, schema  # every keyword is one the answers are checked by
        kinds = schema.get("type", [])
        for kind in [kinds] if isinstance(kinds, str) else kinds:
            assert kind in TYPES, schema


@pytest.mark.asyncio
async def test_the_answers_match_the_documented_schemas(server: Server) -> None:
    doc = document()
    status, served = await call(server, "GET", "/openapi.json")
    assert (status, served) == (200, doc)
    checked: list[str] = []

    async def check(
        method: str, path: str, template: str, body: Any = None, raw: bytes | None = None
    ) -> Any:
        status, answer = await call(server, method, path, body, raw, JSON if raw else None)
        documented = doc["paths"][template][method.lower()]["responses"]
        assert str(status) in documented, f"{method} {path}: {status} is not documented"
        schema = documented[str(status)]["content"]["application/json"]["schema"]
        assert problems(answer, schema, doc) == [], f"{method} {path} {status}"
        checked.append(f"{method} {template} {status}")
        return answer

    created = await check("POST", "/v1/jobs", "/v1/jobs", {"partitions": 3, "priority": 1})
    await until_done(server, created["id"])
    job = f"/v1/jobs/{created['id']}"
    await check("POST", "/v1/jobs", "/v1/jobs", raw=b'{"partitions": 0}')
    await check("GET", "/v1/jobs?limit=1", "/v1/jobs")
    await check("GET", "/v1/jobs?cursor=x", "/v1/jobs")
    await check("GET", job, "/v1/jobs/{id}")
    await check("GET", "/v1/jobs/0123456789abcdef", "/v1/jobs/{id}")
    await check("GET", f"{job}/partitions?limit=2", "/v1/jobs/{id}/partitions")
    await check("DELETE", job, "/v1/jobs/{id}")  # 409: completed
    server.service.pipeline.stop_dispatching()
    queued = await server.service.submit(2, {}, 0)
    await server.service.db(
        server.service.journal.record_attempt, queued.id, 0, "proving failed", 0, 5
    )
    await check("GET", f"/v1/jobs/{queued.id}", "/v1/jobs/{id}")
    await check("DELETE", f"/v1/jobs/{queued.id}", "/v1/jobs/{id}")
    for path in ("/healthz", "/readyz", "/v1/status", "/v1/controller"):
        await check("GET", path, path)
    await check("PATCH", "/v1/controller", "/v1/controller", {"kp": 0.5, "manual_interval_s": 2})
    await check("PATCH", "/v1/controller", "/v1/controller", {"gain": 1})
    assert len(checked) == 16


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"created_at_iso": 5}, "$.created_at_iso: 5 is not string"),
        ({"state": "lost"}, "$.state: 'lost' is not one of"),
        ({"partitions": None}, "$.partitions: None is not integer"),
        ({"updated_at_iso": None}, "$.updated_at_iso: None is not string"),
    ],
    ids=["iso-type", "state", "count", "iso-null"],
)
def test_the_checker_finds_what_breaks_a_job(change: dict[str, Any], problem: str) -> None:
    doc = document()
    job = {"id": "ab", "state": "queued", "partitions": 1, "partitions_done": 0,
           "workload": "ntt", "params": {}, "priority": 0, "created_at": 1.0,
           "created_at_iso": "1970-01-01T00:00:01.000Z", "updated_at": 1.0,
           "updated_at_iso": "1970-01-01T00:00:01.000Z", "error": None,
           "result_digest": None}  # fmt: skip
    schema = {"$ref": "#/components/schemas/Job"}
    assert problems(job, schema, doc) == []
    [found] = problems({**job, **change}, schema, doc)
    assert found.startswith(problem), found
    assert problems({k: v for k, v in job.items() if k != "created_at_iso"}, schema, doc) == [
        "$: created_at_iso is missing"
    ]
