"""What every request goes through, outermost first: its duration observed by route and
status, reads past `PACER_API__MAX_READS` refused at once, errors turned into JSON answers, a
Host or Origin not this service's refused (DNS rebinding: `pacer.api.hosts`), only the probes
answered while the service starts, the token checked, and the content type of writes.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from pacer.api.answers import DURATIONS, HOSTS, READS, REFUSALS, SERVICE, error, too_large
from pacer.api.strict_json import BadInputError
from pacer.journal.health import JournalUnavailable

log = logging.getLogger("pacer.api")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
JOURNAL_RETRY_AFTER = "5"  # seconds a client waits before trying a write the journal refused
METHODS = frozenset({"GET", "HEAD", "POST", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"  # the route label of a request for no route (404, a hostile path)
# What answers while the service starts (it may wait long for its journal), the status page
# among them (it says why): the rest needs what the start opens and resumes.
PROBES = frozenset({"/", "/healthz", "/readyz", "/metrics", "/openapi.json", UNMATCHED})
# Not counted among the reads: the probes, and engine sessions, which last as long as their
# engine and are bounded by PACER_ENGINE__MAX_SESSIONS instead.
UNBOUNDED = PROBES | {"/v1/engine"}


def route_of(request: web.Request) -> str:
    """The route's template (``/v1/jobs/{id}``), never the raw path, so that the label's
    values are the routes and not every id a client sends; ``unmatched`` for no route."""
    route = request.match_info.route
    resource = route.resource if route is not None else None
    if resource is None or request.match_info.http_exception is not None:
        return UNMATCHED
    return resource.canonical


@web.middleware
async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # the client went away before the answer (nginx's code for it)
        raise
    finally:
        method = request.method if request.method in METHODS else "other"
        request.app[DURATIONS].labels(method, route_of(request), str(status)).observe(
            time.perf_counter() - started
        )


@web.middleware
async def reads_bounded(request: web.Request, handler: Handler) -> web.StreamResponse:
    """At most ``max_reads`` reads answered at once; one more is refused at once (503), so that
    a flood of reads leaves writes their share (docs/decisions/api.md, D143)."""
    limit = request.app[SERVICE].settings.api.max_reads
    if not limit or request.method not in ("GET", "HEAD") or route_of(request) in UNBOUNDED:
        return await handler(request)
    reads = request.app[READS]
    if reads[0] >= limit:
        request.app[REFUSALS].labels("reads_full").inc()
        return error(
            503, f"{limit} reads are being answered (PACER_API__MAX_READS): try again after "
            "Retry-After seconds", headers={"Retry-After": "1"},
        )  # fmt: skip
    reads[0] += 1
    try:
        return await handler(request)
    finally:
        reads[0] -= 1


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadInputError as exc:
        response = error(exc.status, exc.rule, exc.field)
        if exc.status == 408:
            response.force_close()
        return response
    except JournalUnavailable as exc:
        return error(503, str(exc), headers={"Retry-After": JOURNAL_RETRY_AFTER})
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SERVICE].settings.api.max_body_bytes
        return error(413, too_large(limit).rule)
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
async def same_host(request: web.Request, handler: Handler) -> web.StreamResponse:
    names = request.app[HOSTS]
    host = request.headers.get("Host")  # none: not a browser, which always names the host
    if host is not None and not names.allows_host(host):
        return error(
            421, f"pacer does not answer to the host name {host[:100]!r}: a web page may be "
            "reaching it by a name of its own (DNS rebinding); a name of this host's belongs "
            "in PACER_API__ALLOWED_HOSTS", "Host",
        )  # fmt: skip
    origin = request.headers.get("Origin")
    if origin is not None and not names.allows_origin(origin):
        return error(
            403, f"requests from the origin {origin[:100]!r} are refused: a web page elsewhere "
            "may not drive pacer; a name of this host's belongs in PACER_API__ALLOWED_HOSTS",
            "Origin",
        )  # fmt: skip
    return await handler(request)


@web.middleware
async def started(request: web.Request, handler: Handler) -> web.StreamResponse:
    service = request.app[SERVICE]
    if service.ready or route_of(request) in PROBES:
        return await handler(request)
    reasons = "; ".join(service.unready_reasons())
    return error(503, f"not serving yet: {reasons}", headers={"Retry-After": "1"})


def bears_token(request: web.Request) -> bool:
    """Whether ``request`` bears ``Authorization: Bearer <PACER_API__TOKEN>``, or no token is
    set."""
    token = request.app[SERVICE].settings.api.token
    if token is None:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # aiohttp decodes header bytes that are not UTF-8 as surrogates: encode them back.
    given_bytes = given.strip().encode("utf-8", "surrogateescape")
    expected = token.get_secret_value().encode()
    return scheme.lower() == "bearer" and hmac.compare_digest(given_bytes, expected)


def unauthorized(what: str) -> web.Response:
    """The 401 of a request without the token."""
    return error(
        401, f"{what} needs Authorization: Bearer <PACER_API__TOKEN>",
        headers={"WWW-Authenticate": 'Bearer realm="pacer"'},
    )  # fmt: skip


@web.middleware
async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD", "OPTIONS") and not bears_token(request):
        return unauthorized("this endpoint")
    return await handler(request)


@web.middleware
async def content_type(request: web.Request, handler: Handler) -> web.StreamResponse:
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


MIDDLEWARES = [timed, reads_bounded, errors, same_host, started, auth, content_type]
