"""`Client`: pacer's HTTP API from Python, on aiohttp.

>>> async def main() -> None:  # doctest: +SKIP
...     async with Client("http://127.0.0.1:9470") as pacer:
...         job_id = await pacer.submit(8, {"log_n": 18})
...         (job,) = await pacer.wait([job_id])
...         print(job["state"], job["result_digest"])
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypedDict

import aiohttp

from pacer.client.errors import ApiError, ResponseError, UnreachableError

TERMINAL = ("completed", "failed", "cancelled")
RETRIED = (429, 503)  # answers that say "not now": retried after their Retry-After
Sleep = Callable[[float], Awaitable[None]]
Progress = Callable[[list[dict[str, Any]], float], None]


class Options(TypedDict, total=False):
    """`Client`'s options after its address and token, as keywords."""

    timeout_s: float
    retries: int
    max_retry_wait_s: float
    sleep: Sleep


def checked_url(url: str) -> str:
    """``url`` without a trailing slash, if it is a service address: ``http://HOST[:PORT]``
    (or https, with a path prefix behind a proxy). ValueError saying what is wrong otherwise.

    >>> checked_url("http://127.0.0.1:9470/")
    'http://127.0.0.1:9470'
    """
    rule = "a service address is http://HOST[:PORT]"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{rule}, got {url!r}: it must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{rule}, got {url!r}: no host")
    try:
        parts.port  # noqa: B018 - parses the port: ValueError when it is not one
    except ValueError as exc:
        raise ValueError(f"{rule}, got {url!r}: {exc}") from None
    if parts.query or parts.fragment or parts.username is not None:
        raise ValueError(f"{rule}, got {url!r}: no user, query or fragment")
    return url.rstrip("/")


def retry_after(value: str | None) -> float | None:
    """A Retry-After header's delay in seconds (its delta-seconds form); None if absent or
    not a number of seconds.

    >>> retry_after("30"), retry_after("soon"), retry_after(None)
    (30.0, None, None)
    """
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class Client:
    """pacer's HTTP API at ``base_url`` (``http://127.0.0.1:9470``), on one aiohttp session.

    Use it as ``async with Client(url) as pacer:``, or call `close` when done. ``token`` is
    sent as a bearer token (where the service sets ``PACER_API__TOKEN``). Each request may
    take ``timeout_s`` seconds. An answer of 429 or 503 that carries Retry-After is retried
    after that many seconds (at most ``max_retry_wait_s``), up to ``retries`` times; then its
    `ResponseError` is raised. ``sleep`` waits between retries and polls (a test passes its
    own). ValueError at construction when ``base_url`` is no service address, or a bound is
    negative.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        max_retry_wait_s: float = 60.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.base_url = checked_url(base_url)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be more than 0, got {timeout_s!r}")
        if retries < 0 or not max_retry_wait_s >= 0:
            raise ValueError(
                f"retries and max_retry_wait_s must be at least 0, got {retries!r} and "
                f"{max_retry_wait_s!r}"
            )
        self.token = token
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_retry_wait_s = max_retry_wait_s
        self.sleep = sleep
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session and its connections (a later call opens a new one)."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
            self._session = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        retry: bool = True,
    ) -> Any:
        """``method path`` with ``body`` as JSON (the API takes writes in JSON only); the
        answer's JSON. A 429 or 503 with Retry-After is retried as the client says, unless
        ``retry`` is False. Raises `ResponseError` for an error answer, `UnreachableError`
        when no answer came."""
        for attempt in range(self.retries + 1):
            try:
                return await self._once(method, path, body, headers)
            except ResponseError as exc:
                if not retry or attempt == self.retries:
                    raise
                if exc.status not in RETRIED or exc.retry_after_s is None:
                    raise
                await self.sleep(min(exc.retry_after_s, self.max_retry_wait_s))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _once(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> Any:
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        sent = {**({"Content-Type": "application/json"} if data is not None else {}),
                **(headers or {})}  # fmt: skip
        try:
            async with self._opened().request(
                method, self.base_url + path, data=data, headers=sent
            ) as answer:
                text = await answer.read()
                if answer.status >= 400:
                    raise ResponseError(
                        method, path, answer.status, _error_body(text),
                        retry_after(answer.headers.get("Retry-After")),
                    )  # fmt: skip
                return json.loads(text or b"null")
        except TimeoutError:
            raise UnreachableError(
                f"{method} {path}: no answer from pacer at {self.base_url} within "
                f"{self.timeout_s:g} s", "timed out", timed_out=True,
            ) from None  # fmt: skip
        except aiohttp.ClientError as exc:
            reason = _reason(exc)
            raise UnreachableError(
                f"cannot reach pacer at {self.base_url}: {reason}", reason
            ) from None

    async def wait_ready(
        self,
        timeout_s: float,
        path: str = "/readyz",
        waiting: Callable[[float, ApiError], None] | None = None,
        unreachable_s: float | None = None,
        poll_s: float = 0.2,
    ) -> float:
        """Poll /readyz until the service is ready (it may still be starting); with
        ``path="/healthz"``, only until it answers (ready or not: draining, its journal
        failing). The seconds it took.

        ``waiting(elapsed_s, error)`` is called after each attempt that failed: to say so, or
        to stop waiting by raising. After ``timeout_s``, `ApiError` (`UnreachableError`
        if the service was never reached; the last error its cause); with
        ``unreachable_s``, an `UnreachableError` is raised as soon as the service has not
        been reached for that long (no service is there at all, rather than one starting).
        """
        started = time.monotonic()
        while True:
            try:
                await self.request("GET", path, retry=False)
                return time.monotonic() - started
            except ApiError as exc:
                elapsed = time.monotonic() - started
                unreachable = isinstance(exc, UnreachableError)
                if unreachable and unreachable_s is not None and elapsed >= unreachable_s:
                    raise
                if elapsed >= timeout_s:
                    message = f"not ready after {timeout_s:g} s: {exc}"
                    if isinstance(exc, UnreachableError):
                        raise UnreachableError(message, exc.reason, exc.timed_out) from exc
                    raise ApiError(message, exc.reason) from exc
                if waiting is not None:
                    waiting(elapsed, exc)
                await self.sleep(poll_s)

    async def submit(
        self,
        partitions: int,
        params: dict[str, Any] | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
    ) -> str:
        """Submit a job of ``partitions`` partitions; its id. ``params`` go to the workload;
        a higher ``priority`` runs first. With ``idempotency_key``, submitting again returns
        the same job instead of a second one. A full backlog (429) is retried after its
        Retry-After, as `request` says."""
        body = {"partitions": partitions, "params": params or {}, "priority": priority}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return str((await self.request("POST", "/v1/jobs", body, headers))["id"])

    async def job(self, job_id: str) -> dict[str, Any]:
        """A job, the counts of its partitions by state and the first page of them."""
        found: dict[str, Any] = await self.request("GET", f"/v1/jobs/{_quoted(job_id)}")
        return found

    async def jobs(
        self, state: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        """A page of jobs, newest first: ``{"jobs": [...], "next_cursor": ...}``. ``state``
        keeps only jobs in that state (queued, running, completed, failed, cancelled);
        ``cursor`` is a page's ``next_cursor``, where the next page starts."""
        query = {"limit": limit, **({"state": state} if state else {}),
                 **({"cursor": cursor} if cursor else {})}  # fmt: skip
        page: dict[str, Any] = await self.request(
            "GET", f"/v1/jobs?{urllib.parse.urlencode(query)}"
        )
        return page

    async def partitions(self, job_id: str, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """A page of a job's partitions: ``limit`` of them from index ``offset``."""
        query = urllib.parse.urlencode({"offset": offset, "limit": limit})
        page: dict[str, Any] = await self.request(
            "GET", f"/v1/jobs/{_quoted(job_id)}/partitions?{query}"
        )
        return page

    async def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a queued or running job; the job, cancelled. Cancelling it again answers the
        same. A completed or failed job raises `ResponseError` 409 (its state in
        ``body["state"]``); an unknown one 404."""
        job: dict[str, Any] = await self.request("DELETE", f"/v1/jobs/{_quoted(job_id)}")
        return job

    async def status(self) -> dict[str, Any]:
        """The service's state: readiness, controller, queues, memory, GPUs, job counts."""
        found: dict[str, Any] = await self.request("GET", "/v1/status")
        return found

    async def wait(
        self,
        job_ids: Sequence[str],
        progress: Progress | None = None,
        poll_s: float = 0.5,
        timeout_s: float | None = None,
    ) -> list[dict[str, Any]]:
        """Poll jobs ``job_ids`` (all at once) every ``poll_s`` seconds until each has ended
        (completed, failed or cancelled); their last states, in the order given.
        ``progress(jobs, elapsed_s)`` is called after each poll, the last one included; it may
        raise to stop waiting. TimeoutError after ``timeout_s`` seconds, if given."""
        started = time.monotonic()
        while True:
            jobs = list(await asyncio.gather(*(self.job(job_id) for job_id in job_ids)))
            elapsed = time.monotonic() - started
            if progress is not None:
                progress(jobs, elapsed)
            if all(job["state"] in TERMINAL for job in jobs):
                return jobs
            if timeout_s is not None and elapsed >= timeout_s:
                left = [job["id"] for job in jobs if job["state"] not in TERMINAL]
                raise TimeoutError(
                    f"{len(left)} of {len(jobs)} jobs not ended after {timeout_s:g} s: "
                    + ", ".join(left)
                )
            await self.sleep(poll_s)


def _error_body(text: bytes) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _reason(exc: aiohttp.ClientError) -> str:
    """A connection failure in a few words: ``Connection refused``, not aiohttp's repr."""
    if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno:
        return os.strerror(exc.os_error.errno)
    return str(exc) or type(exc).__name__


def _quoted(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")
