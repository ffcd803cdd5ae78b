"""Hostile requests against a real in-process service: each gets its 4xx within a second, the
service stays ready and the journal is unchanged."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.api import views
from pacer.journal import SqliteJournal
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.api.raw_http import build, exchange
from tests.servers import settings_for
from tests.tiers import starts_something

TOKEN = "hostile-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}


@dataclass
class Case:
    """One request and the status it must get. ``plain``: send only ``headers`` (no token, no
    JSON content type); ``{job}`` in the path is an existing job's id."""

    id: str
    method: str
    path: str | bytes
    status: int
    body: bytes = b""
    headers: Mapping[str, str | bytes] = field(default_factory=dict)
    plain: bool = False
    field: str | None = None  # the field the error must name, where there is one


def patch(id: str, body: bytes | str, status: int, field: str | None = None) -> Case:
    raw = body.encode() if isinstance(body, str) else body
    return Case(id, "PATCH", "/v1/controller", status, raw, field=field)


def post(id: str, body: bytes | str, status: int, field: str | None = None, **headers: str) -> Case:
    raw = body.encode() if isinstance(body, str) else body
    return Case(id, "POST", "/v1/jobs", status, raw, dict(headers), field=field)


def get(id: str, path: str | bytes, status: int, field: str | None = None) -> Case:
    return Case(id, "GET", path, status, field=field)


DEEP = "[" * 10_000 + "]" * 10_000
KEY = "Idempotency-Key"
# fmt: off
CASES = [
    # PATCH /v1/controller: non-finite, out of range, wrong types
    patch("patch-target-infinity-literal", '{"target_ready": Infinity}', 400),
    patch("patch-target-1e400", '{"target_ready": 1e400}', 422, "target_ready"),
    patch("patch-spread-1e400", '{"spread_sigmas": 1e400}', 422, "spread_sigmas"),
    patch("patch-spread-minus-infinity", '{"spread_sigmas": -Infinity}', 400),
    patch("patch-kp-nan", '{"kp": NaN}', 400),
    patch("patch-kp-1e400", '{"kp": 1e400}', 422, "kp"),
    patch("patch-kp-string", '{"kp": "0.5"}', 422, "kp"),
    patch("patch-kp-bool", '{"kp": true}', 422, "kp"),
    patch("patch-ki-null", '{"ki": null}', 422, "ki"),
    patch("patch-ki-huge", '{"ki": 1e300}', 422, "ki"),
    patch("patch-target-zero", '{"target_ready": 0}', 422, "target_ready"),
    patch("patch-target-huge", '{"target_ready": 1e9}', 422, "target_ready"),
    patch("patch-bootstrap-float", '{"bootstrap_depth": 2.5}', 422, "bootstrap_depth"),
    patch("patch-bootstrap-string", '{"bootstrap_depth": "3"}', 422, "bootstrap_depth"),
    patch("patch-multiplier-huge", '{"multiplier_max": 1e9}', 422, "multiplier_max"),
    patch("patch-limits-crossed", '{"interval_min_s": 120}', 422),
    patch("patch-manual-string", '{"manual_interval_s": "2"}', 422, "manual_interval_s"),
    patch("patch-manual-bool", '{"manual_interval_s": true}', 422, "manual_interval_s"),
    patch("patch-manual-negative", '{"manual_interval_s": -1}', 422, "manual_interval_s"),
    patch("patch-manual-1e400", '{"manual_interval_s": 1e400}', 422, "manual_interval_s"),
    patch("patch-manual-1e300", '{"manual_interval_s": 1e300}', 422, "manual_interval_s"),
    patch("patch-manual-past-max", '{"manual_interval_s": 61}', 422, "manual_interval_s"),
    patch("patch-policy", '{"policy": "unpaced"}', 422, "policy"),
    patch("patch-unknown-field", '{"gain": 1}', 422, "gain"),
    patch("patch-array", "[1, 2]", 400),
    patch("patch-string", '"kp"', 400),
    patch("patch-null", "null", 400),
    patch("patch-empty", "", 400),
    patch("patch-duplicate-key", '{"kp": 0.1, "kp": 9}', 400),
    Case("patch-text-plain", "PATCH", "/v1/controller", 415, b'{"kp": 1}',
         {**AUTH, "Content-Type": "text/plain"}, plain=True),
    # POST /v1/jobs: what the body parser must refuse
    post("huge-integer", '{"partitions": ' + "9" * 5000 + "}", 400),
    post("beyond-64-bits", '{"partitions": 9223372036854775808}', 400),
    post("deep-nesting-10000", '{"params": ' + DEEP + "}", 400),
    post("deep-nesting-40", '{"params": {"seed": ' + "[" * 40 + "]" * 40 + "}}", 400),
    post("nan-literal", '{"partitions": NaN}', 400),
    post("infinity-partitions", '{"partitions": 1e400}', 422, "partitions"),
    post("infinity-in-params", '{"partitions": 1, "params": {"seed": 1e999}}', 422, "params.seed"),
    post("invalid-utf8", b'{"partitions": 1, "workload": "\xff\xfe"}', 400),
    post("utf16", '{"partitions": 1}'.encode("utf-16"), 400),
    post("utf8-bom", b'\xef\xbb\xbf{"partitions": 1}', 400),
    post("lone-surrogate", '{"partitions": 1, "params": {"seed": "\\ud800"}}', 422, "params.seed"),
    post("not-json", "{partitions: 1}", 400),
    post("trailing-garbage", '{"partitions": 1} x', 400),
    post("array-body", "[1]", 400),
    post("duplicate-partitions", '{"partitions": 1, "partitions": 1000000}', 400),
    # POST /v1/jobs: rules of a job
    post("partitions-missing", "{}", 422, "partitions"),
    post("partitions-zero", '{"partitions": 0}', 422, "partitions"),
    post("partitions-negative", '{"partitions": -5}', 422, "partitions"),
    post("partitions-huge", '{"partitions": 10000000}', 422, "partitions"),
    post("partitions-float", '{"partitions": 1.5}', 422, "partitions"),
    post("partitions-string", '{"partitions": "4"}', 422, "partitions"),
    post("partitions-bool", '{"partitions": true}', 422, "partitions"),
    post("partitions-null", '{"partitions": null}', 422, "partitions"),
    post("priority-huge", '{"partitions": 1, "priority": 5000}', 422, "priority"),
    post("priority-string", '{"partitions": 1, "priority": "high"}', 422, "priority"),
    post("params-list", '{"partitions": 1, "params": [1]}', 422, "params"),
    post("params-unknown", '{"partitions": 1, "params": {"depth": 3}}', 422, "params.depth"),
    post("params-log-n-string", '{"partitions": 1, "params": {"log_n": "8"}}', 422, "params.log_n"),
    post("workload-other", '{"partitions": 1, "workload": "msm"}', 422, "workload"),
    post("unknown-field", '{"partitions": 1, "colour": "red"}', 422, "colour"),
    # content types: a web page may POST these cross-site without a preflight
    Case("text-plain-post", "POST", "/v1/jobs", 415, b'{"partitions": 1}',
         {**AUTH, "Content-Type": "text/plain"}, plain=True),
    Case("form-post", "POST", "/v1/jobs", 415, b"partitions=1",
         {**AUTH, "Content-Type": "application/x-www-form-urlencoded"}, plain=True),
    Case("multipart-post", "POST", "/v1/jobs", 415,
         b'--b\r\nContent-Disposition: form-data; name="partitions"\r\n\r\n1\r\n--b--\r\n',
         {**AUTH, "Content-Type": "multipart/form-data; boundary=b"}, plain=True),
    Case("missing-content-type", "POST", "/v1/jobs", 415, b'{"partitions": 1}', AUTH,
         plain=True),
    Case("latin1-charset", "POST", "/v1/jobs", 415, b'{"partitions": 1}',
         {**AUTH, "Content-Type": "application/json; charset=latin-1"}, plain=True),
    # sizes and framing
    Case("huge-content-length", "POST", "/v1/jobs", 413, b'{"partitions": 1}',
         {**AUTH, **JSON, "Content-Length": "1000000000000"}, plain=True),
    post("body-over-limit", '{"partitions": 1, "params": {"pad": "' + "x" * 70_000 + '"}}', 413),
    Case("bad-chunk", "POST", "/v1/jobs", 400, b"zz\r\n{}\r\n0\r\n\r\n",
         {**AUTH, **JSON, "Transfer-Encoding": "chunked"}, plain=True),
    Case("header-too-long", "GET", "/v1/status", 400, headers={"X-Pad": "x" * 9000}),
    Case("content-length-negative", "POST", "/v1/jobs", 400, b'{"partitions": 1}',
         {**AUTH, **JSON, "Content-Length": "-1"}, plain=True),
    Case("content-length-twice", "POST", "/v1/jobs", 400, b'{"partitions": 1}',
         {**AUTH, **JSON, "Content-Length": "17", "content-length": "18"}, plain=True),
    Case("gzip-that-is-not", "POST", "/v1/jobs", 400, b'{"partitions": 1}',
         {**AUTH, **JSON, "Content-Encoding": "gzip"}, plain=True),
    Case("garbage-request-line", "BREW", b"/\x00coffee", 400),
    # authorization
    Case("no-token", "POST", "/v1/jobs", 401, b'{"partitions": 1}', JSON, plain=True),
    Case("non-utf8-authorization", "POST", "/v1/jobs", 401, b'{"partitions": 1}',
         {**JSON, "Authorization": b"Bearer \xff\xfe\xfa"}, plain=True),
    Case("basic-authorization", "POST", "/v1/jobs", 401, b'{"partitions": 1}',
         {**JSON, "Authorization": f"Basic {TOKEN}"}, plain=True),
    Case("token-prefix", "POST", "/v1/jobs", 401, b'{"partitions": 1}',
         {**JSON, "Authorization": f"Bearer {TOKEN[:-1]}"}, plain=True),
    Case("token-in-query", "DELETE", f"/v1/jobs/{{job}}?token={TOKEN}", 401, plain=True),
    # idempotency keys
    post("key-with-space", '{"partitions": 1}', 400, KEY, **{KEY: "a b"}),
    post("key-too-long", '{"partitions": 1}', 400, KEY, **{KEY: "k" * 200}),
    Case("key-non-ascii", "POST", "/v1/jobs", 400, b'{"partitions": 1}',
         {**AUTH, **JSON, "Idempotency-Key": b"\xc3\xa9t\xc3\xa9"}, plain=True,
         field="Idempotency-Key"),
    # query strings
    get("limit-word", "/v1/jobs?limit=abc", 400, "limit"),
    get("limit-zero", "/v1/jobs?limit=0", 400, "limit"),
    get("limit-negative", "/v1/jobs?limit=-1", 400, "limit"),
    get("limit-exponent", "/v1/jobs?limit=1e3", 400, "limit"),
    get("limit-huge", "/v1/jobs?limit=99999999999999999999", 400, "limit"),
    get("limit-arabic-digit", "/v1/jobs?limit=%D9%A3", 400, "limit"),
    get("limit-twice", "/v1/jobs?limit=1&limit=2", 400, "limit"),
    get("limit-bad-percent", "/v1/jobs?limit=%ff", 400, "limit"),
    get("state-bogus", "/v1/jobs?state=bogus", 400, "state"),
    get("query-unknown", "/v1/jobs?limt=5", 400, "limt"),
    get("offset-negative", "/v1/jobs/{job}/partitions?offset=-1", 400, "offset"),
    get("offset-word", "/v1/jobs/{job}/partitions?offset=x", 400, "offset"),
    get("page-limit-huge", "/v1/jobs/{job}/partitions?limit=1001", 400, "limit"),
    get("page-limit-zero", "/v1/jobs/{job}/partitions?limit=0", 400, "limit"),
    get("detail-query-unknown", "/v1/jobs/{job}?verbose=1", 400, "verbose"),
    # ids and paths
    get("id-traversal", "/v1/jobs/..%2F..%2Fetc%2Fpasswd", 404, "id"),
    get("id-dots", "/v1/jobs/../../etc/passwd", 404),
    get("id-overlong", "/v1/jobs/" + "a" * 5000, 404, "id"),
    get("id-unknown", "/v1/jobs/0123456789abcdef", 404, "id"),
    get("id-quote", "/v1/jobs/%27%3B%20DROP%20TABLE%20jobs", 404, "id"),
    get("id-bad-percent", "/v1/jobs/%ff", 404, "id"),
    get("partitions-unknown-job", "/v1/jobs/nope/partitions", 404, "id"),
    Case("delete-unknown", "DELETE", "/v1/jobs/0123456789abcdef", 404, field="id"),
    Case("delete-with-body", "DELETE", "/v1/jobs/{job}", 400, b'{"force": true}'),
    # methods and routes
    Case("put-jobs", "PUT", "/v1/jobs", 405, b'{"partitions": 1}'),
    Case("delete-jobs", "DELETE", "/v1/jobs", 405),
    Case("post-status", "POST", "/v1/status", 405, b"{}"),
    Case("patch-jobs", "PATCH", "/v1/jobs", 405, b"{}"),
    Case("options-jobs", "OPTIONS", "/v1/jobs", 405),
    get("no-such-route", "/v1/controller/x", 404),
]
# fmt: on


@pytest_asyncio.fixture
@starts_something
async def hostile(tmp_path: Path) -> AsyncIterator[Server]:
    settings = settings_for(tmp_path, PACER_API__TOKEN=TOKEN)
    svc = Server(Service.build(settings, registry=CollectorRegistry()))
    await svc.start()
    svc.service.pipeline.stop_dispatching()  # the existing job stays as it is
    await svc.service.submit(3, {}, 0)
    yield svc
    await svc.shutdown()


async def journal_rows(server: Server) -> list[tuple[object, ...]]:
    def read() -> list[tuple[object, ...]]:
        assert isinstance(server.service.journal, SqliteJournal)
        db = server.service.journal._db
        jobs = db.execute("SELECT * FROM jobs ORDER BY seq").fetchall()
        return jobs + db.execute("SELECT * FROM partitions ORDER BY job_id, idx").fetchall()

    return await server.service.db(read)


def test_the_table_has_at_least_sixty_cases() -> None:
    assert len(CASES) >= 60
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.asyncio
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_hostile_request_gets_its_4xx_and_changes_nothing(
    hostile: Server, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    [job] = await hostile.service.db(hostile.service.journal.list_jobs)
    before = await journal_rows(hostile)
    controller = views.controller_state(hostile.service)
    headers = dict(case.headers) if case.plain else {**AUTH, **JSON, **case.headers}
    path = case.path.replace("{job}", job.id) if isinstance(case.path, str) else case.path
    request = build(case.method, path, case.body, headers)
    assert hostile.port is not None
    answer = await asyncio.wait_for(exchange(hostile.port, request), 1.0)
    assert answer.status == case.status, answer.body[:300]
    if answer.headers.get("content-type", "").startswith("application/json"):
        body = json.loads(answer.body)
        assert body["error"]
        assert body.get("field") == case.field
    else:  # only aiohttp's HTTP parser answers in plain text, before the app sees anything
        assert case.field is None
        assert case.status == 400
        malformed = {"reason": "malformed_request"}
        assert hostile.service.registry.get_sample_value("pacer_api_refusals_total", malformed) == 1
    if case.status == 405:
        assert answer.headers["allow"]
    ready = await exchange(hostile.port, build("GET", "/readyz"))
    assert (ready.status, json.loads(ready.body)) == (200, {"status": "ready"})
    assert await journal_rows(hostile) == before
    assert views.controller_state(hostile.service)["settings"] == controller["settings"]
    assert hostile.service.pipeline.backlog == 3
    # The client's fault: nothing for the operator to act on, and no traceback to flood the log.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
