"""HTTP connections that cannot be held open by a client that stops sending.

aiohttp bounds an idle connection (``keepalive_timeout``) and the body a handler reads (the
API's own timeout), but not the request head: a client that sends half a request line, or
drips a header a byte at a time, would hold a connection (and its file descriptor) forever.
``Runner`` serves the app with connections that close when a request head has not arrived
complete ``head_timeout_s`` after the connection opened or after the first byte of the head.

aiohttp also logs every malformed request (a bad request line, a header too long, a broken
chunk) with a traceback at ERROR: a client could fill the log at will. Those are the client's
fault and already answered 400; they are counted and logged at DEBUG instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

log = logging.getLogger("pacer.api")


class _Connection(RequestHandler):
    """aiohttp's connection with a deadline for each request head.

    The timer starts when the connection opens and when the first byte of a later request
    arrives; it stops once the head is parsed (a message is queued or a request is being
    handled). At the deadline a connection still waiting for its head is closed.
    """

    def __init__(
        self, manager: web.Server, *, head_timeout_s: float, on_refusal: Callable[[str], None],
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(manager, **kwargs)
        self._head_timeout_s = head_timeout_s
        self._on_refusal = on_refusal
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_parsed():
            self._disarm()
        elif data:
            self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _head_parsed(self) -> bool:
        # aiohttp's own state: a parsed message waits in the queue, or a handler runs.
        return bool(self._messages) or self._request_in_progress

    def _arm(self) -> None:
        if self._head_timer is None:
            loop = asyncio.get_running_loop()
            self._head_timer = loop.call_later(self._head_timeout_s, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._head_parsed() or self.transport is None:
            return
        peer = self.transport.get_extra_info("peername")
        log.info("closed a connection from %s: no complete request head within %.1f s",
                 peer, self._head_timeout_s)  # fmt: skip
        self._on_refusal("head_timeout")
        self.force_close()

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:  # fmt: skip
        if isinstance(exc, HttpProcessingError):  # the HTTP parser refused the request: 400
            self._on_refusal("malformed_request")
        return super().handle_error(request, status, exc, message)

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        # A request the parser refused, or a body the handler already answered 400 that
        # aiohttp reads again while lingering: the client's doing, not a traceback's worth.
        if isinstance(exc, HttpProcessingError | RequestPayloadError):
            log.debug("malformed request: %s", exc)
        else:
            super().log_exception(*args, **kwargs)


class _Server(web.Server):
    """aiohttp's server, making ``_Connection``s."""

    def __init__(
        self, made: web.Server, head_timeout_s: float, on_refusal: Callable[[str], None]
    ) -> None:
        # The server AppRunner made, with its handler and settings (aiohttp keeps the
        # connection settings in _kwargs; there is no public accessor).
        super().__init__(
            made.request_handler, request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation, loop=asyncio.get_running_loop(),
            **made._kwargs,
        )  # fmt: skip
        self._head_timeout_s = head_timeout_s
        self._on_refusal = on_refusal

    def __call__(self) -> RequestHandler:
        return _Connection(
            self, loop=self._loop, head_timeout_s=self._head_timeout_s, on_refusal=self._on_refusal,
            **self._kwargs,
        )  # fmt: skip


class Runner(web.AppRunner):
    """An AppRunner whose connections close when a request head is late.

    ``on_refusal(reason)`` is called for each connection closed so (``"head_timeout"``) and
    for each request the HTTP parser refused (``"malformed_request"``);
    ``keepalive_timeout`` (s) closes idle connections between requests, as in aiohttp.
    """

    def __init__(
        self, app: web.Application, *, head_timeout_s: float,
        on_refusal: Callable[[str], None] = lambda reason: None, **kwargs: Any,
    ) -> None:  # fmt: skip
        if not head_timeout_s > 0:
            raise ValueError(f"head_timeout_s must be > 0, got {head_timeout_s}")
        super().__init__(app, **kwargs)
        self._head_timeout_s = head_timeout_s
        self._on_refusal = on_refusal

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # the app started and frozen, as AppRunner does
        return _Server(made, self._head_timeout_s, self._on_refusal)
