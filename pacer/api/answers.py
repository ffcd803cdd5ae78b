"""How the API answers: JSON written by one helper, errors with the field and the rule, and the
application's keys (the service it serves, its counters)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import Counter, Histogram

from pacer.api.strict_json import BadInputError, dumps

if TYPE_CHECKING:
    from pacer.api.hosts import HostNames
    from pacer.engine.hub import EngineHub
    from pacer.service.lifecycle import Service

SERVICE: web.AppKey[Service] = web.AppKey("service")
REFUSALS: web.AppKey[Counter] = web.AppKey("refusals")
DURATIONS: web.AppKey[Histogram] = web.AppKey("durations")
OPENAPI: web.AppKey[dict[str, Any]] = web.AppKey("openapi")
HOSTS: web.AppKey[HostNames] = web.AppKey("hosts")
ENGINES: web.AppKey[EngineHub] = web.AppKey("engines")
READS: web.AppKey[list[int]] = web.AppKey("reads")  # [reads being answered now]


def respond(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer: strict JSON, non-finite numbers as null (``strict_json.dumps``)."""
    return web.Response(
        body=dumps(data), status=status, headers=headers, content_type="application/json"
    )


async def respond_off_loop(data: Any) -> web.Response:
    """``respond`` for a large body: serialized on a worker thread, not on the event loop."""
    body = await asyncio.get_running_loop().run_in_executor(None, dumps, data)
    return web.Response(body=body, content_type="application/json")


def error(
    status: int,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    **details: Any,
) -> web.Response:
    """``{"error": message, "field": field, **details}`` with ``status``; no field if None."""
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return respond({**body, **details}, status, headers)


def too_large(limit: int) -> BadInputError:
    return BadInputError(
        None, f"request body over the limit of {limit} bytes (PACER_API__MAX_BODY_BYTES)", 413
    )
