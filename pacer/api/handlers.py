"""The handlers of the API's routes (`pacer.api.routes` lists them, with what each takes and
answers)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from pacer.api import page, views
from pacer.api.answers import (
    ENGINES,
    OPENAPI,
    REFUSALS,
    SERVICE,
    error,
    respond,
    respond_off_loop,
)
from pacer.api.inputs import (
    check_query,
    idempotency_key,
    int_field,
    job_id,
    json_object,
    query_cursor,
    query_int,
)
from pacer.api.middleware import bears_token, unauthorized
from pacer.api.strict_json import BadInputError
from pacer.config import ControllerSettings
from pacer.control.controller import POLICY_FIXED, PIController
from pacer.control.policy import PolicyConflictError
from pacer.engine.stream import serve_engine
from pacer.journal import MAX_PAGE, MAX_PARTITIONS, IdempotencyConflict, JobState
from pacer.service.admission import BacklogFullError

JOB_FIELDS = {"partitions", "workload", "params", "priority"}
CONTROLLER_FIELDS = set(ControllerSettings.model_fields) | {"manual_interval_s"}
DEFAULT_PAGE = 100
MAX_JOBS_PAGE = 10_000
FINISHED = (JobState.COMPLETED, JobState.FAILED)  # cancelling one is a conflict (409)


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


async def status_page(request: web.Request) -> web.Response:
    """The status page for a person (`pacer.api.page`): live from /v1/status and /v1/jobs."""
    return web.Response(text=page.HTML, content_type="text/html", headers=page.HEADERS)


async def openapi(request: web.Request) -> web.Response:
    return respond(request.app[OPENAPI])


async def status(request: web.Request) -> web.Response:
    answer = await views.status(request.app[SERVICE])
    answer["engines"] = request.app[ENGINES].status()
    return respond(answer)


async def engine(request: web.Request) -> web.StreamResponse:
    """An engine session over WebSocket (docs/engine-protocol.md)."""
    if not bears_token(request):
        return unauthorized("an engine session")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return error(400, "an engine session is a WebSocket: GET with Upgrade: websocket "
                     "(docs/engine-protocol.md)")  # fmt: skip
    return await serve_engine(request, request.app[ENGINES])


async def submit_job(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    if service.draining:
        return error(503, "draining: not accepting new jobs")
    key = idempotency_key(request)
    body = await json_object(request)
    unknown = sorted(set(body) - JOB_FIELDS)
    if unknown:
        raise BadInputError(
            unknown[0], f"unknown field {unknown[0]!r} (known: {sorted(JOB_FIELDS)})"
        )
    if "partitions" not in body:
        raise BadInputError("partitions", "partitions is required")
    max_backlog = service.settings.api.max_backlog
    partitions = int_field(body, "partitions", 1, min(MAX_PARTITIONS, max_backlog))
    priority = int_field(body, "priority", -1000, 1000) if "priority" in body else 0
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
    check_query(request, ("state", "limit", "cursor"))
    text = request.query.get("state")
    if text is not None and text not in {s.value for s in JobState}:
        rule = f"state must be one of {', '.join(s.value for s in JobState)}"
        raise BadInputError("state", rule, 400)
    limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_JOBS_PAGE)
    created_at, seq = query_cursor(request, *views.JOBS_CURSOR) or (None, None)
    after = None if seq is None else (float(created_at), int(seq))
    state = None if text is None else JobState(text)
    return await respond_off_loop(await views.jobs_page(request.app[SERVICE], state, limit, after))


async def get_job(request: web.Request) -> web.Response:
    found = job_id(request)
    check_query(request, ())
    job = await views.job_detail(request.app[SERVICE], found, DEFAULT_PAGE)
    if job is None:
        return error(404, f"no job {found!r}", "id")
    return await respond_off_loop(job)


async def get_partitions(request: web.Request) -> web.Response:
    found = job_id(request)
    check_query(request, ("offset", "limit", "cursor"))
    if "offset" in request.query and "cursor" in request.query:
        raise BadInputError("cursor", "give offset or cursor, not both", 400)
    limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    offset = query_int(request, "offset", 0, 0, MAX_PARTITIONS)
    (start,) = query_cursor(request, *views.PARTITIONS_CURSOR) or (offset,)
    if not 0 <= start <= MAX_PARTITIONS:
        raise BadInputError("cursor", "cursor is not one this API gave", 400)
    page = await views.partition_page(request.app[SERVICE], found, start, limit)
    if page is None:
        return error(404, f"no job {found!r}", "id")
    return await respond_off_loop(page)


async def cancel_job(request: web.Request) -> web.Response:
    """Cancel a queued or running job (a cancelled one is answered as it is, so a retried
    DELETE is safe); 409 naming the state for a completed or failed one."""
    found = job_id(request)
    job = await request.app[SERVICE].cancel(found)
    if job is None:
        return error(404, f"no job {found!r}", "id")
    if job.state in FINISHED:
        return error(
            409, f"job {found} is {job.state.value}: only a queued or running job can be "
            "cancelled", "id", state=job.state.value,
        )  # fmt: skip
    return respond(views.job_json(job))


async def get_controller(request: web.Request) -> web.Response:
    return respond(views.controller_state(request.app[SERVICE]))


def _manual_within(settings: ControllerSettings, interval_s: object) -> None:
    try:
        settings.check_manual_interval(interval_s)
    except ValueError as exc:  # nothing is applied: the gains wait for a valid interval too
        raise BadInputError("manual_interval_s", str(exc)) from None


async def patch_controller(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await json_object(request)
    unknown = sorted(set(body) - CONTROLLER_FIELDS)
    if unknown:
        raise BadInputError(unknown[0], f"unknown field {unknown[0]!r} (known: "
                       f"{sorted(CONTROLLER_FIELDS)})")  # fmt: skip
    if "policy" in body:
        raise BadInputError("policy", POLICY_FIXED)
    manual = body.pop("manual_interval_s", ...)
    try:
        if isinstance(service.policy, PIController):
            # Strict: a number where a number is due, never a string or a bool made into one.
            merged = {**service.policy.settings.model_dump(), **body}
            settings = ControllerSettings.model_validate(merged, strict=True)
            if manual is not ... and manual is not None:  # within the limits it will have
                _manual_within(settings, manual)
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
    return respond(views.controller_state(service))
