"""The HTTP API (aiohttp): metrics, health, status, jobs and the controller.

Bad input gets a 4xx with ``{"error": ..., "field": ...}`` naming the field and the rule, and
changes nothing. Retuning the controller while a baseline policy dispatches gets 409 naming
the policy. When ``PACER_API__TOKEN`` is set, the endpoints that change state require
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from pacer.config import ControllerSettings
from pacer.controller import POLICY_FIXED
from pacer.journal_health import JournalUnavailable
from pacer.policy import PolicyConflictError

if TYPE_CHECKING:
    from pacer.service import Service

SERVICE: web.AppKey[Service] = web.AppKey("service")
MAX_PARTITIONS = 1_000_000
JOB_FIELDS = {"partitions", "workload", "params", "priority"}
CONTROLLER_FIELDS = set(ControllerSettings.model_fields) | {"manual_interval_s"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadInputError(Exception):
    """A request that breaks a rule: ``field`` and the rule, for a 4xx answer."""

    def __init__(self, field: str | None, rule: str, status: int = 422) -> None:
        super().__init__(rule)
        self.field = field
        self.rule = rule
        self.status = status


def error(status: int, message: str, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadInputError as exc:
        return error(exc.status, exc.rule, exc.field)
    except JournalUnavailable as exc:
        return error(503, str(exc))
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SERVICE].settings.api.max_body_bytes
        return error(
            413, f"request body over the limit of {limit} bytes (PACER_API__MAX_BODY_BYTES)"
        )
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            return error(exc.status, exc.reason)
        raise


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[SERVICE].settings.api.token
    if token is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {token.get_secret_value()}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            response = error(401, "this endpoint needs Authorization: Bearer <PACER_API__TOKEN>")
            response.headers["WWW-Authenticate"] = 'Bearer realm="pacer"'
            return response
    return await handler(request)


async def _json_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(None, f"body is not valid JSON: {exc}", 400) from None
    if not isinstance(body, dict):
        raise BadInputError(None, "body must be a JSON object", 400)
    return body


def _int_field(body: dict[str, Any], name: str, low: int, high: int) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(name, f"{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadInputError(name, f"{name} must be between {low} and {high}, got {value}")
    return value


# -- handlers --------------------------------------------------------------------------------


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[SERVICE].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def readyz(request: web.Request) -> web.Response:
    reasons = request.app[SERVICE].unready_reasons()
    if reasons:
        return error(503, "; ".join(reasons))
    return web.json_response({"status": "ready"})


async def status(request: web.Request) -> web.Response:
    return web.json_response(await request.app[SERVICE].status())


async def submit_job(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    if service.draining:
        return error(503, "draining: not accepting new jobs")
    body = await _json_object(request)
    unknown = sorted(set(body) - JOB_FIELDS)
    if unknown:
        raise BadInputError(
            unknown[0], f"unknown field {unknown[0]!r} (known: {sorted(JOB_FIELDS)})"
        )
    if "partitions" not in body:
        raise BadInputError("partitions", "partitions is required")
    partitions = _int_field(body, "partitions", 1, MAX_PARTITIONS)
    priority = _int_field(body, "priority", -1000, 1000) if "priority" in body else 0
    workload = body.get("workload", service.workload.name)
    if workload != service.workload.name:
        raise BadInputError(
            "workload", f"workload must be {service.workload.name!r} (this service's), got "
            f"{workload!r}",
        )  # fmt: skip
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise BadInputError("params", f"params must be an object, got {type(params).__name__}")
    try:
        params = service.workload.check_params(params)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0] if str(exc).startswith("params.") else "params"
        raise BadInputError(field, str(exc)) from None
    job = await service.submit(partitions, params, priority)
    return web.json_response({"id": job.id, "state": job.state}, status=202)


async def list_jobs(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    state = request.query.get("state")
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        raise BadInputError("limit", "limit must be an integer", 400) from None
    if not 1 <= limit <= 10_000:
        raise BadInputError("limit", f"limit must be between 1 and 10000, got {limit}", 400)
    try:
        jobs = await service.list_jobs(state, limit)
    except ValueError as exc:
        raise BadInputError("state", str(exc), 400) from None
    return web.json_response({"jobs": jobs})


async def get_job(request: web.Request) -> web.Response:
    job = await request.app[SERVICE].job_detail(request.match_info["id"])
    if job is None:
        return error(404, f"no job {request.match_info['id']!r}", "id")
    return web.json_response(job)


async def cancel_job(request: web.Request) -> web.Response:
    job = await request.app[SERVICE].cancel(request.match_info["id"])
    if job is None:
        return error(404, f"no job {request.match_info['id']!r}", "id")
    return web.json_response(job)


async def get_controller(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].controller_state())


async def patch_controller(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await _json_object(request)
    unknown = sorted(set(body) - CONTROLLER_FIELDS)
    if unknown:
        raise BadInputError(unknown[0], f"unknown field {unknown[0]!r} (known: "
                       f"{sorted(CONTROLLER_FIELDS)})")  # fmt: skip
    if "policy" in body:
        raise BadInputError("policy", POLICY_FIXED)
    manual = body.pop("manual_interval_s", ...)
    if (
        manual is not ...
        and manual is not None
        and (isinstance(manual, bool) or not isinstance(manual, int | float) or manual <= 0)
    ):
        raise BadInputError("manual_interval_s", "manual_interval_s must be a number > 0, or null")
    try:
        service.retune(body, manual)
    except PolicyConflictError as exc:
        raise BadInputError(None, str(exc), 409) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        rule = str(first["msg"]).removeprefix("Value error, ")
        raise BadInputError(field, f"{field}: {rule}" if field else rule) from None
    except ValueError as exc:
        raise BadInputError(None, str(exc)) from None
    return web.json_response(service.controller_state())


def build_app(service: Service) -> web.Application:
    """The aiohttp application serving ``service``."""
    app = web.Application(
        middlewares=[_errors, _auth], client_max_size=service.settings.api.max_body_bytes
    )
    app[SERVICE] = service
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/status", status)
    app.router.add_post("/v1/jobs", submit_job)
    app.router.add_get("/v1/jobs", list_jobs)
    app.router.add_get("/v1/jobs/{id}", get_job)
    app.router.add_delete("/v1/jobs/{id}", cancel_job)
    app.router.add_get("/v1/controller", get_controller)
    app.router.add_patch("/v1/controller", patch_controller)
    return app
