"""What the client raises: one base class, and a subclass for each way a call can fail."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A call to the service failed. ``reason`` says why in a few words (``Connection
    refused``, ``503 starting``), for a progress line."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class UnreachableError(ApiError):
    """No answer came: the connection failed (refused, no route, a name not found) or the
    answer took longer than the client's ``timeout_s`` (``timed_out`` is then True)."""

    def __init__(self, message: str, reason: str, timed_out: bool = False) -> None:
        super().__init__(message, reason)
        self.timed_out = timed_out


class ResponseError(ApiError):
    """The service answered with an error status. ``body`` is its JSON error body as sent
    (``{"error": ..., "field": ...}``; ``{}`` if the body was not JSON); ``error`` and
    ``field`` are read from it; ``retry_after_s`` is its Retry-After header (s), if any."""

    def __init__(
        self, method: str, path: str, status: int, body: dict[str, Any],
        retry_after_s: float | None = None,
    ) -> None:  # fmt: skip
        self.status = status
        self.body = body
        self.error: str | None = body.get("error") if isinstance(body.get("error"), str) else None
        self.field: str | None = body.get("field") if isinstance(body.get("field"), str) else None
        self.retry_after_s = retry_after_s
        answer = f"{status} {self.error or 'no error message'}"
        super().__init__(f"{method} {path}: {answer}", answer)
