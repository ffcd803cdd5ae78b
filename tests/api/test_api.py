"""The HTTP API of an in-process service on an ephemeral port, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from pacer.api import views
from pacer.journal import PartitionResult
from pacer.plan import ConfigurationError
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import JSON, call, settings_for, until_done, url

pytestmark = pytest.mark.asyncio
TOKEN = "0123456789abcdef-token"


async def test_health_and_readiness(server: Server) -> None:
    assert await call(server, "GET", "/healthz") == (200, {"status": "alive"})
    assert await call(server, "GET", "/readyz") == (200, {"status": "ready"})


async def test_submit_runs_a_job_to_completion(server: Server) -> None:
    status, body = await call(server, "POST", "/v1/jobs", {"partitions": 4, "priority": 2})
    assert status == 202
    job = await until_done(server, body["id"])
    assert job["state"] == "completed"
    assert job["partitions_done"] == 4
    assert len(job["result_digest"]) == 64
    results = job["partition_results"]
    assert [p["index"] for p in results] == [0, 1, 2, 3]
    assert all(p["state"] == "completed" and p["gpu_s"] > 0 for p in results)
    # On the CPU every proof is checked (PACER_VERIFY_EVERY unset): its check's seconds too.
    assert set(results[0]["phases"]) == {"intt", "coset_ntt", "pointwise", "coset_intt",
                                         "synthesis_wait", "verify"}  # fmt: skip
    assert all(0 <= p["phases"]["synthesis_wait"] <= p["synthesis_s"] for p in results)
    assert all(0 < p["phases"]["verify"] < 60 for p in results)
    status, listing = await call(server, "GET", "/v1/jobs?state=completed")
    assert [j["id"] for j in listing["jobs"]] == [body["id"]]


BAD_JOBS = [
    (b"{not json", 400, None, "body is not valid JSON"),
    (b"[1, 2]", 400, None, "body must be a JSON object"),
    (b"{}", 422, "partitions", "partitions is required"),
    (b'{"partitions": "4"}', 422, "partitions", "partitions must be an integer, got str"),
    (b'{"partitions": 0}', 422, "partitions", "partitions must be between 1 and 1000000"),
    (b'{"partitions": 2.5}', 422, "partitions", "partitions must be an integer, got float"),
    (b'{"partitions": true}', 422, "partitions", "partitions must be an integer, got bool"),
    (b'{"partitions": 1, "colour": "red"}', 422, "colour", "unknown field 'colour'"),
    (b'{"partitions": 1, "priority": 5000}', 422, "priority", "priority must be between"),
    (b'{"partitions": 1, "workload": "msm"}', 422, "workload", "workload must be 'ntt'"),
    (b'{"partitions": 1, "params": [1]}', 422, "params", "params must be an object, got list"),
    (b'{"partitions": 1, "params": {"log_n": 40}}', 422, "params.log_n",
     "params.log_n: must be between 4 and 24, got 40"),
    (b'{"partitions": 1, "params": {"depth": 3}}', 422, "params.depth",
     "params.depth: unknown parameter"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "status", "field", "message"),
    BAD_JOBS,
    ids=[
        "malformed",
        "array",
        "missing",
        "string",
        "zero",
        "float",
        "bool",
        "unknown",
        "priority",
        "workload",
        "params-type",
        "param-range",
        "param-unknown",
    ],
)
async def test_bad_job_is_refused_and_nothing_is_journaled(
    server: Server, raw: bytes, status: int, field: str | None, message: str
) -> None:
    got, body = await call(server, "POST", "/v1/jobs", raw=raw, headers=JSON)
    assert got == status
    assert message in body["error"]
    assert body.get("field") == field
    assert await server.service.db(server.service.journal.list_jobs) == []
    assert server.service.pipeline.backlog == 0


@pytest.mark.slow
async def test_oversized_body_is_refused(tmp_path: Path) -> None:
    svc = Server(
        Service.build(settings_for(tmp_path, PACER_API__MAX_BODY_BYTES="1024"), CollectorRegistry())
    )
    await svc.start()
    try:
        big = b'{"partitions": 1, "params": {"seed": 1, "pad": "' + b"x" * 4000 + b'"}}'
        status, body = await call(svc, "POST", "/v1/jobs", raw=big, headers=JSON)
        assert status == 413
        assert "over the limit of 1024 bytes" in body["error"]
        assert await svc.service.db(svc.service.journal.list_jobs) == []
    finally:
        await svc.shutdown()


@pytest.mark.slow
async def test_token_guards_the_endpoints_that_change_state(tmp_path: Path) -> None:
    svc = Server(Service.build(settings_for(tmp_path, PACER_API__TOKEN=TOKEN), CollectorRegistry()))
    await svc.start()
    try:
        status, body = await call(svc, "POST", "/v1/jobs", {"partitions": 1})
        assert status == 401
        assert "Authorization: Bearer" in body["error"]
        wrong = {"Authorization": "Bearer nope"}
        assert (await call(svc, "POST", "/v1/jobs", {"partitions": 1}, headers=wrong))[0] == 401
        assert (await call(svc, "PATCH", "/v1/controller", {"kp": 1.0}))[0] == 401
        assert (await call(svc, "DELETE", "/v1/jobs/x"))[0] == 401
        assert (await call(svc, "GET", "/v1/status"))[0] == 200
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert (await call(svc, "POST", "/v1/jobs", {"partitions": 1}, headers=good))[0] == 202
    finally:
        await svc.shutdown()


@pytest.mark.parametrize(
    ("env", "allowed"),
    [
        ({"PACER_API__HOST": "0.0.0.0"}, False),
        ({"PACER_API__HOST": "0.0.0.0", "PACER_API__TOKEN": TOKEN}, True),
        ({"PACER_API__HOST": "0.0.0.0", "PACER_API__ALLOW_PUBLIC": "true"}, True),
        ({"PACER_API__HOST": "::1"}, True),
        ({"PACER_API__HOST": "localhost"}, True),
    ],
    ids=["public-no-token", "public-token", "public-allowed", "ipv6-loopback", "localhost"],
)
async def test_non_loopback_needs_a_token(
    tmp_path: Path, env: dict[str, str], allowed: bool
) -> None:
    settings = settings_for(tmp_path, **env)
    if allowed:
        await Server(Service.build(settings, CollectorRegistry())).shutdown()
    else:
        with pytest.raises(ConfigurationError, match="set PACER_API__TOKEN"):
            Server(Service.build(settings, CollectorRegistry()))


async def test_cancel(server: Server) -> None:
    server.service.pipeline.stop_dispatching()  # keep the job queued
    _, body = await call(server, "POST", "/v1/jobs", {"partitions": 50})
    status, job = await call(server, "DELETE", f"/v1/jobs/{body['id']}")
    assert (status, job["state"]) == (200, "cancelled")
    assert server.service.pipeline.backlog == 0
    assert (await call(server, "DELETE", "/v1/jobs/nope"))[0] == 404
    assert (
        server.service.registry.get_sample_value("pacer_jobs_total", {"outcome": "cancelled"}) == 1
    )


async def test_controller_patch_is_bumpless_and_validated(server: Server) -> None:
    _, before = await call(server, "GET", "/v1/controller")
    status, after = await call(server, "PATCH", "/v1/controller", {"kp": 0.9, "ki": 0.02})
    assert status == 200
    assert (after["settings"]["kp"], after["settings"]["ki"]) == (0.9, 0.02)
    assert after["terms"]["interval_s"] == pytest.approx(before["terms"]["interval_s"])
    for body, field, message in [
        ({"kp": -1}, "kp", "kp: Input should be greater than or equal to 0"),
        ({"gain": 1}, "gain", "unknown field 'gain'"),
        ({"interval_min_s": 120}, None, "interval_min_s (120.0) must be less than"),
        (
            {"manual_interval_s": 0},
            "manual_interval_s",
            "manual_interval_s must be from "
            "interval_min_s (0.001 s) to interval_max_s (60 s), got 0",
        ),
        # Dispatch would stop while /readyz stayed 200; nor are the gains beside it applied.
        (
            {"kp": 0.5, "manual_interval_s": 1e300},
            "manual_interval_s",
            "to interval_max_s (60 s), got 1e+300",
        ),
        ({"manual_interval_s": 0.0001}, "manual_interval_s", "got 0.0001"),
        (
            {"interval_max_s": 10, "manual_interval_s": 30},
            "manual_interval_s",
            "to interval_max_s (10 s), got 30",
        ),  # the limits it would have
        ({"manual_interval_s": "2"}, "manual_interval_s", "got '2'"),
    ]:
        status, err = await call(server, "PATCH", "/v1/controller", body)
        assert status == 422, body
        assert message in err["error"]
        assert err.get("field") == field
    _, unchanged = await call(server, "GET", "/v1/controller")
    assert unchanged["settings"] == after["settings"]
    status, manual = await call(server, "PATCH", "/v1/controller", {"manual_interval_s": 2.5})
    assert (status, manual["terms"]["mode"], manual["terms"]["interval_s"]) == (200, "manual", 2.5)
    longer = {"interval_max_s": 120, "manual_interval_s": 90}  # within the limits it sets
    status, manual = await call(server, "PATCH", "/v1/controller", longer)
    assert (status, manual["terms"]["interval_s"]) == (200, 90)


async def test_status_reports_the_pipeline(server: Server) -> None:
    status, body = await call(server, "GET", "/v1/status")
    assert status == 200
    assert body["workload"] == "ntt"
    assert set(body["queues"]) >= {"backlog", "synthesizing", "ready", "proving"}
    assert body["memory"]["budget_bytes"] == server.service.plan.budget_bytes > 0
    assert body["memory"]["budget_automatic"] is True  # unset: what the host gives
    assert body["gpus"][0]["gpu"] == 0
    assert body["controller"]["terms"]["mode"] in ("bootstrap", "pacing", "drained")
    # The CPU workload, with Numba (a dev dependency) taken by PACER_NTT__CPU_BACKEND=auto.
    synthesis = body["synthesis"]
    assert synthesis == {"executor": "threads", "kernel": "numba", "restarts": 0,
                         "busy_ratio": synthesis["busy_ratio"],
                         "busy_seconds": synthesis["busy_seconds"]}  # fmt: skip
    assert 0 <= synthesis["busy_ratio"] <= 1
    assert synthesis["busy_seconds"] >= 0
    plan = body["plan"]  # what the service runs by, the workload's say where settings are unset
    assert (plan["workload"], plan["field"], plan["kernel"]) == ("ntt", "babybear", "numba")
    assert (plan["verify_every"], plan["threads_per_synthesis"], plan["pool_slots"]) == (1, 1, 0)
    assert plan["budget_bytes"] == body["memory"]["budget_bytes"]
    assert plan["synthesis_concurrency"] == body["memory"]["caps"]["synthesis_concurrency"]
    assert plan["partition_bytes"] == body["memory"]["partition_bytes"]


def strict_loads(text: str) -> Any:
    """json.loads as a strict parser reads it: NaN and Infinity are errors."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


async def raw_get(server: Server, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url(server, path)) as r:
        return r.status, await r.text()


async def test_status_and_controller_are_strict_json_on_a_cold_start(server: Server) -> None:
    for path in ("/v1/status", "/v1/controller"):
        status, text = await raw_get(server, path)
        assert status == 200
        assert "Infinity" not in text
        assert "NaN" not in text
        body = strict_loads(text)
        controller = body if path == "/v1/controller" else body["controller"]
        assert controller["terms"]["rate_cap_per_s"] is None  # no cap until a synthesis time
        assert controller["synthesis_supply_per_s"] is None  # ... nor a supply
        assert controller["synthesis_queue"] == 0  # ... nor a queue in front of the processes
        assert controller["synthesis_handoff_s"] is None  # ... nor a measured hand-off


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"target_ready": 1e400}', "target_ready"),
        (b'{"spread_sigmas": 1e400}', "spread_sigmas"),
        (b'{"kp": 1e400}', "kp"),
        (b'{"ki": "0.1"}', "ki"),
        (b'{"kp": true}', "kp"),
    ],
    ids=["target-overflow", "spread-overflow", "kp-overflow", "ki-string", "kp-bool"],
)
async def test_a_refused_retune_leaves_dispatch_running(
    server: Server, raw: bytes, field: str
) -> None:
    status, err = await call(server, "PATCH", "/v1/controller", raw=raw, headers=JSON)
    assert (status, err["field"]) == (422, field)
    _, created = await call(server, "POST", "/v1/jobs", {"partitions": 3})
    assert (await until_done(server, created["id"]))["state"] == "completed"
    assert server.service.pipeline._dispatcher is not None
    assert not server.service.pipeline._dispatcher.done()


async def test_job_detail_and_a_page_of_a_million_partitions_stay_small(server: Server) -> None:
    # Journaled directly: the backlog's share of a million partitions is not the subject.
    job = await server.service.db(server.service.journal.add_job, 1_000_000, "ntt", {})
    results = [PartitionResult(job.id, i, f"d{i}", 1.0, 0.5) for i in range(0, 4000, 2)]
    await server.service.db(server.service.journal.complete_partitions, results)
    async with aiohttp.ClientSession() as session:
        async with session.get(url(server, f"/v1/jobs/{job.id}")) as r:
            detail_bytes = await r.read()
        page_path = f"/v1/jobs/{job.id}/partitions?offset=999000&limit=1000"
        async with session.get(url(server, page_path)) as r:
            page_bytes = await r.read()
    detail = strict_loads(detail_bytes.decode())
    assert len(detail_bytes) < 32_000
    assert detail["partitions_summary"] == {
        "pending": 998_000, "completed": 2000, "failed": 0, "first_failures": []
    }  # fmt: skip
    assert [p["state"] for p in detail["partition_results"][:3]] == [
        "completed", "pending", "completed"
    ]  # fmt: skip
    assert len(detail["partition_results"]) == 100
    assert detail["partitions_next_offset"] == 100
    page = strict_loads(page_bytes.decode())
    assert len(page_bytes) < 300_000
    assert [p["index"] for p in page["partition_results"]] == list(range(999_000, 1_000_000))
    assert {p["state"] for p in page["partition_results"]} == {"pending"}
    assert (page["partitions"], page["offset"], page["next_offset"]) == (1_000_000, 999_000, None)


async def test_pages_walk_a_job_to_its_end(server: Server) -> None:
    _, created = await call(server, "POST", "/v1/jobs", {"partitions": 5})
    await until_done(server, created["id"])
    seen: list[int] = []
    offset: int | None = 0
    while offset is not None:
        status, page = await call(
            server, "GET", f"/v1/jobs/{created['id']}/partitions?offset={offset}&limit=2"
        )
        assert status == 200
        seen += [p["index"] for p in page["partition_results"]]
        assert all(p["state"] == "completed" and p["digest"] for p in page["partition_results"])
        offset = page["next_offset"]
    assert seen == [0, 1, 2, 3, 4]
    _, beyond = await call(server, "GET", f"/v1/jobs/{created['id']}/partitions?offset=9")
    assert (beyond["partition_results"], beyond["next_offset"]) == ([], None)


@pytest.mark.slow
async def test_a_job_past_the_backlog_bound_gets_429_with_retry_after(tmp_path: Path) -> None:
    svc = Server(
        Service.build(settings_for(tmp_path, PACER_API__MAX_BACKLOG="10"), CollectorRegistry())
    )
    await svc.start()
    try:
        svc.service.pipeline.stop_dispatching()
        assert (await call(svc, "POST", "/v1/jobs", {"partitions": 8}))[0] == 202
        async with aiohttp.ClientSession() as session:
            body = aiohttp.JsonPayload({"partitions": 3})
            async with session.post(url(svc, "/v1/jobs"), data=body) as r:
                assert r.status == 429
                assert r.headers["Retry-After"] == "30"  # no proving rate known yet
                refusal = await r.json()
        assert refusal["field"] == "partitions"
        assert refusal["error"].startswith("backlog full: 8 partitions wait for dispatch and 3")
        assert len(await svc.service.db(svc.service.journal.list_jobs)) == 1
        assert svc.service.pipeline.backlog == 8
        assert (await call(svc, "POST", "/v1/jobs", {"partitions": 2}))[0] == 202
        status, err = await call(svc, "POST", "/v1/jobs", {"partitions": 11})
        assert (status, err["field"]) == (422, "partitions")  # could never be admitted
        assert "between 1 and 10" in err["error"]
        labels = {"reason": "backlog_full"}
        assert svc.service.registry.get_sample_value("pacer_api_refusals_total", labels) == 1
    finally:
        await svc.shutdown()


async def test_retry_after_follows_the_proving_rate(server: Server) -> None:
    controller = server.service.controller
    for _ in range(5):
        controller.observe_gpu_service(0.5)  # one worker: 2 partitions/s
    server.service.admission.max_backlog = 10
    server.service.pipeline.stop_dispatching()
    assert (await call(server, "POST", "/v1/jobs", {"partitions": 10}))[0] == 202
    async with aiohttp.ClientSession() as session:
        body = aiohttp.JsonPayload({"partitions": 100})
        async with session.post(url(server, "/v1/jobs"), data=body) as r:
            assert (r.status, r.headers["Retry-After"]) == (429, "50")  # 100 more at 2/s


@pytest.mark.slow
async def test_an_idempotency_key_makes_a_retried_submit_return_the_same_job(
    tmp_path: Path,
) -> None:
    svc = Server(
        Service.build(settings_for(tmp_path, PACER_API__MAX_BACKLOG="10"), CollectorRegistry())
    )
    await svc.start()
    try:
        svc.service.pipeline.stop_dispatching()
        key = {"Idempotency-Key": "job-2026-01-01T00:00:00Z-7f3a"}
        first = await call(svc, "POST", "/v1/jobs", {"partitions": 6}, headers=key)
        assert first[0] == 202
        again = await call(svc, "POST", "/v1/jobs", {"partitions": 6}, headers=key)
        assert again == (200, {"id": first[1]["id"], "state": "queued", "replayed": True})
        assert svc.service.pipeline.backlog == 6
        # The backlog has no room for a new job of 6, but a retry is answered all the same.
        assert (await call(svc, "POST", "/v1/jobs", {"partitions": 6}))[0] == 429
        assert (await call(svc, "POST", "/v1/jobs", {"partitions": 6}, headers=key))[0] == 200
        status, err = await call(svc, "POST", "/v1/jobs", {"partitions": 5}, headers=key)
        assert (status, err["field"]) == (422, "Idempotency-Key")
        assert "used for job" in err["error"]
        assert "with a different request" in err["error"]
        assert [j.id for j in await svc.service.db(svc.service.journal.list_jobs)] == [
            first[1]["id"]
        ]
    finally:
        await svc.shutdown()
    again_svc = Server(
        Service.build(settings_for(tmp_path), CollectorRegistry())
    )  # the key is journaled
    await again_svc.start()
    try:
        after = await call(again_svc, "POST", "/v1/jobs", {"partitions": 6}, headers=key)
        assert after == (200, {"id": first[1]["id"], "state": "queued", "replayed": True})
    finally:
        await again_svc.shutdown()


async def test_concurrent_submits_with_one_key_make_one_job(server: Server) -> None:
    server.service.pipeline.stop_dispatching()
    key = {"Idempotency-Key": "twin"}
    answers = await asyncio.gather(
        *(call(server, "POST", "/v1/jobs", {"partitions": 2}, headers=key) for _ in range(5))
    )
    assert sorted(status for status, _ in answers) == [200, 200, 200, 200, 202]
    assert len({body["id"] for _, body in answers}) == 1
    assert server.service.pipeline.backlog == 2


async def test_a_json_body_with_a_utf8_charset_is_accepted(server: Server) -> None:
    headers = {"Content-Type": "application/json; charset=UTF-8"}
    status, _ = await call(server, "POST", "/v1/jobs", raw=b'{"partitions": 1}', headers=headers)
    assert status == 202


async def test_an_unexpected_error_is_a_logged_500_with_a_json_body(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_: Server) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "status", broken)
    status, body = await call(server, "GET", "/v1/status")
    assert (status, body) == (500, {"error": "internal error; the service's log has the details"})
    assert "unexpected error answering GET /v1/status" in caplog.text
    assert "RuntimeError: a bug" in caplog.text
    assert await call(server, "GET", "/readyz") == (200, {"status": "ready"})
