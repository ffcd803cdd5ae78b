"""The HTTP API (aiohttp): metrics, health, status, jobs and the controller.

Bad input gets a 4xx with ``{"error": ..., "field": ...}`` naming the field and the rule, and
changes nothing; an unexpected error is logged and answered 500 with a JSON body. Retuning the
controller while a baseline policy dispatches gets 409 naming the policy. When
``PACER_API__TOKEN`` is set, the endpoints that change state require
``Authorization: Bearer <token>``.

Writes are safe from cross-site requests: POST and PATCH need ``Content-Type:
application/json`` (415 otherwise), which a web page can only send after a CORS preflight this
API never answers; DELETE carries no body (400 if it does). Bodies are strict JSON
(``pacer.strict_json``); every JSON answer is written by ``respond``, with non-finite numbers
as null.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from pydantic import ValidationError

from pacer.admission import BacklogFullError
from pacer.config import ControllerSettings
from pacer.connection import Runner
from pacer.controller import POLICY_FIXED, PIController
from pacer.journal import MAX_IDEMPOTENCY_KEY, MAX_PAGE, MAX_PARTITIONS, IdempotencyConflict
from pacer.journal_health import JournalUnavailable
from pacer.policy import PolicyConflictError
from pacer.strict_json import BadInputError, dumps, parse_object

if TYPE_CHECKING:
    from pacer.service import Service

__all__ = ["BadInputError", "build_app", "build_runner", "respond"]

log = logging.getLogger("pacer.api")
SERVICE: web.AppKey[Service] = web.AppKey("service")
REFUSALS: web.AppKey[Counter] = web.AppKey("refusals")
JOB_FIELDS = {"partitions", "workload", "params", "priority"}
CONTROLLER_FIELDS = set(ControllerSettings.model_fields) | {"manual_interval_s"}
# Job ids are 16 hex digits; anything else is no job, answered without asking the journal.
JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}")
QUERY_INT = re.compile(r"[0-9]{1,9}")
DEFAULT_PAGE = 100
LINGER_S = 2.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- answers -----------------------------------------------------------------------------------


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
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return respond(body, status, headers)


def _too_large(limit: int) -> BadInputError:
    return BadInputError(
        None, f"request body over the limit of {limit} bytes (PACER_API__MAX_BODY_BYTES)", 413
    )


# -- middlewares -------------------------------------------------------------------------------


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadInputError as exc:
        response = error(exc.status, exc.rule, exc.field)
        if exc.status == 408:
            response.force_close()
        return response
    except JournalUnavailable as exc:
        return error(503, str(exc))
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SERVICE].settings.api.max_body_bytes
        return error(413, _too_large(limit).rule)
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            allow = exc.headers.get("Allow")
            return error(exc.status, exc.reason, headers={"Allow": allow} if allow else None)
        raise
    except (asyncio.CancelledError, ConnectionError):
        raise  # the client went away: aiohttp closes the connection
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path[:200])
        return error(500, "internal error; the service's log has the details")


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[SERVICE].settings.api.token
    if token is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # aiohttp decodes header bytes that are not UTF-8 as surrogates: encode them back.
        given_bytes = given.strip().encode("utf-8", "surrogateescape")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given_bytes, expected):
            return error(
                401, "this endpoint needs Authorization: Bearer <PACER_API__TOKEN>",
                headers={"WWW-Authenticate": 'Bearer realm="pacer"'},
            )  # fmt: skip
    return await handler(request)


@web.middleware
async def _content_type(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.match_info.http_exception is None:  # a route matched: 404 and 405 go first
        if request.method in ("POST", "PATCH"):
            charset = (request.charset or "utf-8").lower()
            if request.content_type != "application/json" or charset != "utf-8":
                raise BadInputError(
                    None, f"{request.method} needs Content-Type: application/json (UTF-8), got "
                    f"{request.headers.get('Content-Type', 'none')[:100]!r}", 415,
                )  # fmt: skip
        elif request.method == "DELETE" and request.body_exists:
            raise BadInputError(None, "DELETE takes no body", 400)
    return await handler(request)


# -- input -------------------------------------------------------------------------------------


async def _json_object(request: web.Request) -> dict[str, Any]:
    """The request's body as a JSON object, read within PACER_API__BODY_TIMEOUT_S."""
    api = request.app[SERVICE].settings.api
    if request.content_length is not None and request.content_length > api.max_body_bytes:
        raise _too_large(api.max_body_bytes)  # refused before reading a byte of it
    try:
        async with asyncio.timeout(api.body_timeout_s):
            raw = await request.read()
    except TimeoutError:
        request.app[REFUSALS].labels("body_timeout").inc()
        log.info("request body from %s not received within %.1f s: 408, connection closed",
                 request.remote, api.body_timeout_s)  # fmt: skip
        raise BadInputError(
            None, f"request body not received within {api.body_timeout_s:g} s "
            "(PACER_API__BODY_TIMEOUT_S)", 408,
        ) from None  # fmt: skip
    except RequestPayloadError as exc:
        raise BadInputError(None, f"request body could not be read: {exc}", 400) from None
    return parse_object(raw)


def _int_field(body: dict[str, Any], name: str, low: int, high: int) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(name, f"{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadInputError(name, f"{name} must be between {low} and {high}, got {value}")
    return value


def _query(request: web.Request, known: tuple[str, ...]) -> None:
    """Refuse query parameters that are unknown or given twice."""
    for name in request.query:
        if name not in known:
            raise BadInputError(
                name[:64], f"unknown query parameter {name[:64]!r} (known: {', '.join(known)})",
                400,
            )  # fmt: skip
        if len(request.query.getall(name)) > 1:
            raise BadInputError(name, f"query parameter {name} given more than once", 400)


def _query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not QUERY_INT.fullmatch(text) or not low <= int(text) <= high:
        raise BadInputError(
            name, f"{name} must be a whole number from {low} to {high}, got {text[:32]!r}", 400
        )
    return int(text)


def _job_id(request: web.Request) -> str:
    job_id = request.match_info["id"]
    if not JOB_ID.fullmatch(job_id):
        raise BadInputError("id", f"no job {job_id[:64]!r}", 404)
    return job_id


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise BadInputError(
            "Idempotency-Key", f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible "
            "ASCII characters without spaces", 400,
        )  # fmt: skip
    return key


# -- handlers ----------------------------------------------------------------------------------


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[SERVICE].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the event loop answers. A stalled pipeline stays alive: a restart would lose
    the work in flight, and readiness says it instead."""
    return respond({"status": "alive"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 503 with every reason (starting, draining, a task down, stalled, ...)."""
    reasons = request.app[SERVICE].unready_reasons()
    if reasons:
        return respond({"error": "; ".join(reasons), "reasons": reasons}, status=503)
    return respond({"status": "ready"})


async def status(request: web.Request) -> web.Response:
    return respond(await request.app[SERVICE].status())


async def submit_job(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    if service.draining:
        return error(503, "draining: not accepting new jobs")
    key = _idempotency_key(request)
    body = await _json_object(request)
    unknown = sorted(set(body) - JOB_FIELDS)
    if unknown:
        raise BadInputError(
            unknown[0], f"unknown field {unknown[0]!r} (known: {sorted(JOB_FIELDS)})"
        )
    if "partitions" not in body:
        raise BadInputError("partitions", "partitions is required")
    max_backlog = service.settings.api.max_backlog
    partitions = _int_field(body, "partitions", 1, min(MAX_PARTITIONS, max_backlog))
    priority = _int_field(body, "priority", -1000, 1000) if "priority" in body else 0
    workload = body.get("workload", service.workload.name)
    if workload != service.workload.name:
        raise BadInputError(
            "workload", f"workload must be {service.workload.name!r} (this service's), got "
            f"{str(workload)[:64]!r}",
        )  # fmt: skip
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise BadInputError("params", f"params must be an object, got {type(params).__name__}")
    try:
        params = service.workload.check_params(params)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0] if str(exc).startswith("params.") else "params"
        raise BadInputError(field, str(exc)) from None
    try:
        if key is None:
            job, created = await service.submit(partitions, params, priority), True
        else:
            job, created = await service.submit_once(key, partitions, params, priority)
    except BacklogFullError as exc:
        request.app[REFUSALS].labels("backlog_full").inc()
        return error(429, str(exc), "partitions", headers={"Retry-After": str(exc.retry_after_s)})
    except IdempotencyConflict as exc:
        raise BadInputError("Idempotency-Key", str(exc)) from None
    if created:
        return respond({"id": job.id, "state": job.state}, status=202)
    return respond({"id": job.id, "state": job.state, "replayed": True})


async def list_jobs(request: web.Request) -> web.Response:
    _query(request, ("state", "limit"))
    state = request.query.get("state")
    limit = _query_int(request, "limit", 100, 1, 10_000)
    try:
        jobs = await request.app[SERVICE].list_jobs(state, limit)
    except ValueError as exc:
        raise BadInputError("state", str(exc), 400) from None
    return await respond_off_loop({"jobs": jobs})


async def get_job(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    _query(request, ())
    job = await request.app[SERVICE].job_detail(job_id, DEFAULT_PAGE)
    if job is None:
        return error(404, f"no job {job_id!r}", "id")
    return await respond_off_loop(job)


async def get_partitions(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    _query(request, ("offset", "limit"))
    offset = _query_int(request, "offset", 0, 0, MAX_PARTITIONS)
    limit = _query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    page = await request.app[SERVICE].partition_page(job_id, offset, limit)
    if page is None:
        return error(404, f"no job {job_id!r}", "id")
    return await respond_off_loop(page)


async def cancel_job(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    job = await request.app[SERVICE].cancel(job_id)
    if job is None:
        return error(404, f"no job {job_id!r}", "id")
    return respond(job)


async def get_controller(request: web.Request) -> web.Response:
    return respond(request.app[SERVICE].controller_state())


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
        and (isinstance(manual, bool) or not isinstance(manual, int | float) or not manual > 0)
    ):
        raise BadInputError("manual_interval_s", "manual_interval_s must be a number > 0, or null")
    try:
        if body and isinstance(service.policy, PIController):
            # Strict: a number where a number is due, never a string or a bool made into one.
            merged = {**service.policy.settings.model_dump(), **body}
            ControllerSettings.model_validate(merged, strict=True)
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
    return respond(service.controller_state())


def build_app(service: Service) -> web.Application:
    """The aiohttp application serving ``service``."""
    app = web.Application(
        middlewares=[_errors, _auth, _content_type],
        client_max_size=service.settings.api.max_body_bytes,
    )
    app[SERVICE] = service
    app[REFUSALS] = Counter(
        "pacer_api_refusals_total",
        "Requests refused for the service's sake: backlog_full (429), body_timeout (408), "
        "head_timeout (connection closed before a complete request head), malformed_request "
        "(refused by the HTTP parser: 400)",
        ["reason"],
        registry=service.registry,
    )
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/status", status)
    app.router.add_post("/v1/jobs", submit_job)
    app.router.add_get("/v1/jobs", list_jobs)
    app.router.add_get("/v1/jobs/{id}", get_job)
    app.router.add_get("/v1/jobs/{id}/partitions", get_partitions)
    app.router.add_delete("/v1/jobs/{id}", cancel_job)
    app.router.add_get("/v1/controller", get_controller)
    app.router.add_patch("/v1/controller", patch_controller)
    return app


def build_runner(service: Service) -> Runner:
    """The runner serving ``service``'s app, with the connection timeouts of its settings."""
    app = build_app(service)
    api = service.settings.api
    refusals = app[REFUSALS]
    return Runner(
        app, head_timeout_s=api.header_timeout_s,
        on_refusal=lambda reason: refusals.labels(reason).inc(),
        keepalive_timeout=api.keepalive_timeout_s, access_log=None, handle_signals=False,
        # After an answer to a request whose body is unread (408, 413), aiohttp reads and drops
        # what still comes for this long, so the client sees the answer, then closes.
        lingering_time=min(api.body_timeout_s, LINGER_S),
    )  # fmt: skip
