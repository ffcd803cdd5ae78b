"""The API's one route table: what `build_app` registers and what `/openapi.json` describes.

Each `Route` names its handler and says what it takes (path and query parameters, a JSON
body) and what it answers (status → description and schema, by the name of a schema of
`pacer.api.openapi.SCHEMAS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from pacer.api import handlers
from pacer.journal import MAX_PAGE, MAX_PARTITIONS, JobState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Param:
    """A parameter of a route: in its path, its query string or a header."""

    name: str
    where: Literal["path", "query", "header"]
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Answer:
    """One status a route answers: what it means, and its JSON body's schema (a name of
    `pacer.api.openapi.SCHEMAS`; None where the body is not JSON)."""

    description: str
    schema: str | None = "Error"
    media: str = "text/plain"  # the body's media type where it is not JSON


@dataclass(frozen=True)
class Route:
    method: Literal["GET", "POST", "PATCH", "DELETE"]
    path: str
    handler: Handler
    operation_id: str
    summary: str
    answers: dict[int, Answer]
    params: tuple[Param, ...] = ()
    body: str | None = None  # the name of the JSON body's schema
    writes: bool = False  # changes state: needs the token where PACER_API__TOKEN is set


JOB_ID = Param("id", "path", "A job's id (16 hex digits).", required=True)
LIMIT_JOBS = Param(
    "limit",
    "query",
    "Jobs on the page (default 100).",
    {"type": "integer", "minimum": 1, "maximum": handlers.MAX_JOBS_PAGE},
)
LIMIT_PARTITIONS = Param(
    "limit",
    "query",
    "Partitions on the page (default 100).",
    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
)
CURSOR = Param("cursor", "query", "Where the page starts: a page's next_cursor, as it is.")
BAD_QUERY = Answer("A query parameter unknown, repeated or out of range, or a bad cursor.")
NO_JOB = Answer("No such job (or an id that cannot be one).")
UNAUTHORIZED = Answer("PACER_API__TOKEN is set and the request does not bear it.")
UNAVAILABLE = Answer("Draining, or the journal cannot be written (the reason in error).")
UNPROCESSABLE = Answer("A field breaks a rule (named in field).")
NOT_JSON = Answer("The body is not a JSON object, or breaks the rules of strict JSON.")
MEDIA = Answer("A write that is not Content-Type: application/json (UTF-8).")
TOO_LARGE = Answer("The body is over PACER_API__MAX_BODY_BYTES.")
NO_BODY = Answer("The body did not arrive within PACER_API__BODY_TIMEOUT_S.")

# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("GET", "/", handlers.status_page, "statusPage",
          "The status page for a person: jobs, controller, GPUs, memory, live (a script polls "
          "/v1/status and /v1/jobs).",
          {200: Answer("The page: HTML with its style and script inline.", None, "text/html")}),
    Route("GET", "/metrics", handlers.metrics, "metrics",
          "Prometheus exposition of the service's registry.",
          {200: Answer("The exposition (text format 0.0.4).", None)}),
    Route("GET", "/healthz", handlers.healthz, "healthz",
          "Liveness: the event loop answers (not the pipeline's health).",
          {200: Answer("Alive.", "Alive")}),
    Route("GET", "/readyz", handlers.readyz, "readyz", "Readiness, with every reason not to be.",
          {200: Answer("Ready.", "Ready"), 503: Answer("Not ready, and why.", "NotReady")}),
    Route("GET", "/openapi.json", handlers.openapi, "openapi", "This document.",
          {200: Answer("The OpenAPI 3.1 document.", "OpenApi")}),
    Route("GET", "/v1/status", handlers.status, "getStatus",
          "Readiness, health, controller, queues, memory, pool, calls, retries, synthesis, "
          "GPUs, job counts and the journal's health.",
          {200: Answer("The service's state.", "Status")}),
    Route("GET", "/v1/engine", handlers.engine, "engineSession",
          "An engine session: a WebSocket of JSON messages (docs/engine-protocol.md).",
          {101: Answer("Switching to the WebSocket of the session.", None),
           400: Answer("Not a WebSocket upgrade."), 401: UNAUTHORIZED}),
    Route("POST", "/v1/jobs", handlers.submit_job, "submitJob",
          "Accept a job: journaled (durable) before the answer, then queued.",
          {202: Answer("Accepted.", "Accepted"),
           200: Answer("A retry under the same Idempotency-Key: the job it made.", "Accepted"),
           400: NOT_JSON, 401: UNAUTHORIZED, 408: NO_BODY, 413: TOO_LARGE, 415: MEDIA,
           422: UNPROCESSABLE,
           429: Answer("The backlog is full: try again after Retry-After seconds."),
           503: UNAVAILABLE},
          (Param("Idempotency-Key", "header", "1 to 128 visible ASCII characters: a retry "
                 "with the same key and request gets the same job."),),
          body="JobRequest", writes=True),
    Route("GET", "/v1/jobs", handlers.list_jobs, "listJobs",
          "Jobs, newest first, a page at a time; jobs accepted meanwhile never shift a page.",
          {200: Answer("A page of jobs.", "JobPage"), 400: BAD_QUERY},
          (Param("state", "query", "Only jobs in this state.",
                 {"type": "string", "enum": [s.value for s in JobState]}),
           LIMIT_JOBS, CURSOR)),
    Route("GET", "/v1/jobs/{id}", handlers.get_job, "getJob",
          "A job, the counts of its partitions by state, its latest failures and its first "
          "page of partitions.",
          {200: Answer("The job.", "JobDetail"), 400: BAD_QUERY, 404: NO_JOB}, (JOB_ID,)),
    Route("GET", "/v1/jobs/{id}/partitions", handlers.get_partitions, "listPartitions",
          "A page of a job's partitions in index order, pending ones included.",
          {200: Answer("A page of partitions.", "PartitionPage"), 400: BAD_QUERY,
           404: NO_JOB},
          (JOB_ID, Param("offset", "query", "The first partition's index (or give cursor).",
                         {"type": "integer", "minimum": 0, "maximum": MAX_PARTITIONS}),
           LIMIT_PARTITIONS, CURSOR)),
    Route("DELETE", "/v1/jobs/{id}", handlers.cancel_job, "cancelJob",
          "Cancel a queued or running job; one already cancelled is answered as it is.",
          {200: Answer("The job, cancelled.", "Job"), 400: Answer("A body was sent."),
           401: UNAUTHORIZED, 404: NO_JOB,
           409: Answer("The job has completed or failed (its state in state).",
                       "CancelConflict")},
          (JOB_ID,), writes=True),
    Route("GET", "/v1/controller", handlers.get_controller, "getController",
          "The dispatch policy; under pi also its settings, terms and estimates.",
          {200: Answer("The dispatch policy's state.", "Controller")}),
    Route("PATCH", "/v1/controller", handlers.patch_controller, "retuneController",
          "Change gains, setpoint or limits (bumpless), or set or clear a manual interval.",
          {200: Answer("The controller's new state.", "Controller"), 400: NOT_JSON,
           401: UNAUTHORIZED, 408: NO_BODY, 409: Answer("A baseline policy dispatches."),
           413: TOO_LARGE, 415: MEDIA, 422: UNPROCESSABLE},
          body="ControllerPatch", writes=True),
)
# fmt: on


def add_routes(app: web.Application) -> None:
    """Register every route of `ROUTES` on ``app`` (a GET answers HEAD too)."""
    for route in ROUTES:
        if route.method == "GET":
            app.router.add_get(route.path, route.handler)
        else:
            app.router.add_route(route.method, route.path, route.handler)
