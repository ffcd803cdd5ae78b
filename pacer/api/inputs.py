"""What a request brings, checked: its JSON body, query parameters, the job id in its path, its
idempotency key, and the cursor of a page."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from pacer.api.answers import REFUSALS, SERVICE, too_large
from pacer.api.strict_json import BadInputError, parse_object
from pacer.journal import MAX_IDEMPOTENCY_KEY

log = logging.getLogger("pacer.api")
# Job ids are 16 hex digits; anything else is no job, answered without asking the journal.
JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}")
QUERY_INT = re.compile(r"[0-9]{1,9}")
CURSOR = re.compile(r"[A-Za-z0-9_-]{1,200}")


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request's body as a JSON object, read within PACER_API__BODY_TIMEOUT_S."""
    api = request.app[SERVICE].settings.api
    if request.content_length is not None and request.content_length > api.max_body_bytes:
        raise too_large(api.max_body_bytes)  # refused before reading a byte of it
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


def int_field(body: dict[str, Any], name: str, low: int, high: int) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(name, f"{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadInputError(name, f"{name} must be between {low} and {high}, got {value}")
    return value


def check_query(request: web.Request, known: tuple[str, ...]) -> None:
    """Refuse query parameters that are unknown or given twice."""
    for name in request.query:
        if name not in known:
            raise BadInputError(
                name[:64], f"unknown query parameter {name[:64]!r} (known: {', '.join(known)})",
                400,
            )  # fmt: skip
        if len(request.query.getall(name)) > 1:
            raise BadInputError(name, f"query parameter {name} given more than once", 400)


def query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not QUERY_INT.fullmatch(text) or not low <= int(text) <= high:
        raise BadInputError(
            name, f"{name} must be a whole number from {low} to {high}, got {text[:32]!r}", 400
        )
    return int(text)


def job_id(request: web.Request) -> str:
    found = request.match_info["id"]
    if not JOB_ID.fullmatch(found):
        raise BadInputError("id", f"no job {found[:64]!r}", 404)
    return found


def idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise BadInputError(
            "Idempotency-Key", f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible "
            "ASCII characters without spaces", 400,
        )  # fmt: skip
    return key


def encode_cursor(kind: str, *values: float) -> str:
    """An opaque cursor: where the next page of ``kind`` starts (URL-safe, no padding).

    >>> decode_cursor(encode_cursor("jobs", 1767225600.25, 42), "jobs", (float, int))
    (1767225600.25, 42)
    """
    raw = json.dumps([kind, *values], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(text: str, kind: str, types: tuple[type, ...]) -> tuple[Any, ...]:
    """The values `encode_cursor` put in ``text`` for ``kind``, each of ``types`` (an int
    does for a float); BadInputError (400, ``cursor``) for anything else."""
    try:
        if not CURSOR.fullmatch(text):
            raise ValueError(text)
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not isinstance(value, list) or value[:1] != [kind] or len(value) != 1 + len(types):
            raise ValueError(text)
        for item, wanted in zip(value[1:], types, strict=True):
            accepted = (int, float) if wanted is float else (wanted,)
            if isinstance(item, bool) or not isinstance(item, accepted):
                raise ValueError(text)
    except (ValueError, binascii.Error):
        raise BadInputError(
            "cursor", "cursor is not one this API gave: pass a page's next_cursor back as it is",
            400,
        ) from None  # fmt: skip
    return tuple(value[1:])


def query_cursor(request: web.Request, kind: str, types: tuple[type, ...]) -> tuple[Any, ...]:
    """The ``cursor`` query parameter decoded (`decode_cursor`); () if there is none."""
    text = request.query.get("cursor")
    return () if text is None else decode_cursor(text, kind, types)
