"""The aiohttp application serving a service, and the runner that serves it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import Counter, Histogram

from pacer.api.answers import DURATIONS, ENGINES, HOSTS, OPENAPI, READS, REFUSALS, SERVICE
from pacer.api.connection import Runner
from pacer.api.hosts import HostNames
from pacer.api.middleware import MIDDLEWARES
from pacer.api.openapi import document
from pacer.api.routes import ROUTES, add_routes
from pacer.engine.hub import EngineHub

if TYPE_CHECKING:
    from pacer.service.lifecycle import Service

LINGER_S = 2.0
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def build_app(service: Service) -> web.Application:
    """The aiohttp application serving ``service``: every route of `ROUTES`, its counters on
    the service's registry."""
    app = web.Application(
        middlewares=MIDDLEWARES, client_max_size=service.settings.api.max_body_bytes
    )
    app[SERVICE] = service
    app[HOSTS] = HostNames.of(service.settings.api)
    app[OPENAPI] = document(ROUTES)
    app[READS] = [0]
    app[REFUSALS] = Counter(
        "pacer_api_refusals_total",
        "Requests refused for the service's sake: backlog_full (429), body_timeout (408), "
        "head_timeout (connection closed before a complete request head), malformed_request "
        "(refused by the HTTP parser: 400), reads_full (503: PACER_API__MAX_READS reads being "
        "answered)",
        ["reason"],
        registry=service.registry,
    )
    app[DURATIONS] = Histogram(
        "pacer_http_request_duration_seconds",
        "Time from a request's head to its answer, by method, route template (unmatched: no "
        "route) and status (s)",
        ["method", "route", "status"],
        buckets=DURATION_BUCKETS,
        registry=service.registry,
    )
    app[ENGINES] = hub = EngineHub(service.settings, service.registry, service.clock)
    app.on_startup.append(lambda _: asyncio.to_thread(hub.store.load))
    app.on_shutdown.append(lambda _: hub.close())
    add_routes(app)
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
        # At the stop, requests still answered (waiting on the journal, if on anything) get
        # this long before they are cancelled, as the journal's close does.
        shutdown_timeout=service.settings.shutdown.journal_s,
        # After an answer to a request whose body is unread (408, 413), aiohttp reads and drops
        # what still comes for this long, so the client sees the answer, then closes.
        lingering_time=min(api.body_timeout_s, LINGER_S),
    )  # fmt: skip
