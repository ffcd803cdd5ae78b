"""The HTTP API (aiohttp): metrics, health, status, jobs, the controller, and its own OpenAPI
document at ``/openapi.json``, all from one route table (`routes.ROUTES`).

Bad input gets a 4xx with ``{"error": ..., "field": ...}`` naming the field and the rule, and
changes nothing; an unexpected error is logged and answered 500 with a JSON body. Retuning the
controller while a baseline policy dispatches, or cancelling a job that has completed or
failed, gets 409 naming the policy or the state. When ``PACER_API__TOKEN`` is set, the
endpoints that change state require ``Authorization: Bearer <token>``.

Writes are safe from cross-site requests: POST and PATCH need ``Content-Type:
application/json`` (415 otherwise), which a web page can only send after a CORS preflight this
API never answers; DELETE carries no body (400 if it does). Bodies are strict JSON
(``pacer.api.strict_json``); every JSON answer is written by ``respond``, with non-finite numbers
as null. Lists come a page at a time, with a ``next_cursor``; times come as epoch seconds with
their ISO 8601 twin (`views`).

Modules: ``app`` (the application and its runner), ``routes`` (the table), ``handlers``,
``views`` (the JSON answers), ``inputs`` (bodies, queries, cursors), ``middleware`` (timing,
errors, auth, content type), ``answers`` (``respond``, ``error``), ``openapi``.
"""

from pacer.api.answers import respond
from pacer.api.app import build_app, build_runner
from pacer.api.strict_json import BadInputError

__all__ = ["BadInputError", "build_app", "build_runner", "respond"]
