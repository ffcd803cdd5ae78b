"""A small HTTP client of the API, for `pacer submit` and `pacer status` (standard library)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any


class ApiError(Exception):
    """The service answered with an error, or could not be reached; ``reason`` says why in a
    few words (``Connection refused``, ``503 starting``)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


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


class Client:
    """Talks to a pacer service at ``base_url`` (``http://127.0.0.1:9470``); ValueError at
    construction when that is no service address."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = checked_url(base_url)
        self.token = token
        self.timeout_s = timeout_s

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        """``method path`` with ``body`` as JSON (the API takes writes in JSON only); the
        answer's JSON. ApiError for an error answer or when the service cannot be reached."""
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                detail = exc.reason
            answer = f"{exc.code} {detail}"
            raise ApiError(f"{method} {path}: {answer}", answer) from None
        except (urllib.error.URLError, OSError) as exc:
            cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else cause
            raise ApiError(f"cannot reach pacer at {self.base_url}: {exc}", str(reason)) from None

    def wait_ready(
        self,
        timeout_s: float,
        path: str = "/readyz",
        waiting: Callable[[float, ApiError], None] | None = None,
    ) -> None:
        """Poll /readyz until the service is ready (it may still be starting); with
        ``path="/healthz"``, only until it answers (ready or not: draining, its journal failing).

        ``waiting(elapsed_s, error)`` is called after each attempt that failed: to say so, or
        to stop waiting by raising (when the process serving has exited, say).
        """
        started = time.monotonic()
        while True:
            try:
                self.request("GET", path)
                return
            except ApiError as exc:
                elapsed = time.monotonic() - started
                if elapsed >= timeout_s:
                    raise ApiError(f"not ready after {timeout_s:g} s: {exc}", exc.reason) from None
                if waiting is not None:
                    waiting(elapsed, exc)
                time.sleep(0.2)

    def submit(
        self, partitions: int, params: dict[str, Any] | None = None, priority: int = 0,
        idempotency_key: str | None = None,
    ) -> str:  # fmt: skip
        """Submit a job; its id. With ``idempotency_key``, submitting again returns the same
        job instead of a second one."""
        body = {"partitions": partitions, "params": params or {}, "priority": priority}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return str(self.request("POST", "/v1/jobs", body, headers)["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        """A job, the counts of its partitions by state and the first page of them."""
        result: dict[str, Any] = self.request("GET", f"/v1/jobs/{_quoted(job_id)}")
        return result

    def partitions(self, job_id: str, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """A page of a job's partitions: ``limit`` of them from index ``offset``."""
        query = urllib.parse.urlencode({"offset": offset, "limit": limit})
        result: dict[str, Any] = self.request(
            "GET", f"/v1/jobs/{_quoted(job_id)}/partitions?{query}"
        )
        return result

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/v1/status")
        return result


def _quoted(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")
