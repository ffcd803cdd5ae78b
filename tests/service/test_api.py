"""The HTTP API of an in-process service on an ephemeral port, over real HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from pacer.service import ConfigurationError, Service
from tests.service.conftest import settings_for

pytestmark = pytest.mark.asyncio
JSON = {"Content-Type": "application/json"}
TOKEN = "0123456789abcdef-token"


def url(service: Service, path: str) -> str:
    return f"http://127.0.0.1:{service.port}{path}"


async def call(
    service: Service, method: str, path: str, body: Any = None, raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:  # fmt: skip
    async with aiohttp.ClientSession() as session:
        data = raw if raw is not None else (None if body is None else aiohttp.JsonPayload(body))
        async with session.request(method, url(service, path), data=data, headers=headers) as r:
            payload = await r.json() if r.content_type == "application/json" else await r.text()
            return r.status, payload


async def until_done(service: Service, job_id: str) -> dict[str, Any]:
    for _ in range(600):
        status, job = await call(service, "GET", f"/v1/jobs/{job_id}")
        assert status == 200
        if job["state"] in ("completed", "failed", "cancelled"):
            return dict(job)
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} did not finish")


async def test_health_and_readiness(service: Service) -> None:
    assert await call(service, "GET", "/healthz") == (200, {"status": "alive"})
    assert await call(service, "GET", "/readyz") == (200, {"status": "ready"})


async def test_submit_runs_a_job_to_completion(service: Service) -> None:
    status, body = await call(service, "POST", "/v1/jobs", {"partitions": 4, "priority": 2})
    assert status == 202
    job = await until_done(service, body["id"])
    assert job["state"] == "completed"
    assert job["partitions_done"] == 4
    assert len(job["result_digest"]) == 64
    results = job["partition_results"]
    assert [p["index"] for p in results] == [0, 1, 2, 3]
    assert all(p["state"] == "completed" and p["gpu_s"] > 0 for p in results)
    assert set(results[0]["phases"]) == {"intt", "coset_ntt", "pointwise", "coset_intt"}
    status, listing = await call(service, "GET", "/v1/jobs?state=completed")
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
    service: Service, raw: bytes, status: int, field: str | None, message: str
) -> None:
    got, body = await call(service, "POST", "/v1/jobs", raw=raw, headers=JSON)
    assert got == status
    assert message in body["error"]
    assert body.get("field") == field
    assert await service.db(service.journal.list_jobs) == []
    assert service.pipeline.backlog == 0


async def test_oversized_body_is_refused(tmp_path: Path) -> None:
    svc = Service(settings_for(tmp_path, PACER_API__MAX_BODY_BYTES="1024"), CollectorRegistry())
    await svc.start()
    try:
        big = b'{"partitions": 1, "params": {"seed": 1, "pad": "' + b"x" * 4000 + b'"}}'
        status, body = await call(svc, "POST", "/v1/jobs", raw=big, headers=JSON)
        assert status == 413
        assert "over the limit of 1024 bytes" in body["error"]
        assert await svc.db(svc.journal.list_jobs) == []
    finally:
        await svc.shutdown()


async def test_token_guards_the_endpoints_that_change_state(tmp_path: Path) -> None:
    svc = Service(settings_for(tmp_path, PACER_API__TOKEN=TOKEN), CollectorRegistry())
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
        await Service(settings, CollectorRegistry()).shutdown()
    else:
        with pytest.raises(ConfigurationError, match="set PACER_API__TOKEN"):
            Service(settings, CollectorRegistry())


async def test_cancel(service: Service) -> None:
    service.pipeline.stop_dispatching()  # keep the job queued
    _, body = await call(service, "POST", "/v1/jobs", {"partitions": 50})
    status, job = await call(service, "DELETE", f"/v1/jobs/{body['id']}")
    assert (status, job["state"]) == (200, "cancelled")
    assert service.pipeline.backlog == 0
    assert (await call(service, "DELETE", "/v1/jobs/nope"))[0] == 404
    assert service.registry.get_sample_value("pacer_jobs_total", {"outcome": "cancelled"}) == 1


async def test_controller_patch_is_bumpless_and_validated(service: Service) -> None:
    _, before = await call(service, "GET", "/v1/controller")
    status, after = await call(service, "PATCH", "/v1/controller", {"kp": 0.9, "ki": 0.02})
    assert status == 200
    assert (after["settings"]["kp"], after["settings"]["ki"]) == (0.9, 0.02)
    assert after["terms"]["interval_s"] == pytest.approx(before["terms"]["interval_s"])
    for body, field, message in [
        ({"kp": -1}, "kp", "kp: Input should be greater than or equal to 0"),
        ({"gain": 1}, "gain", "unknown field 'gain'"),
        ({"interval_min_s": 120}, None, "interval_min_s (120.0) must be less than"),
        ({"manual_interval_s": 0}, "manual_interval_s", "must be a number > 0, or null"),
    ]:
        status, err = await call(service, "PATCH", "/v1/controller", body)
        assert status == 422, body
        assert message in err["error"]
        assert err.get("field") == field
    _, unchanged = await call(service, "GET", "/v1/controller")
    assert unchanged["settings"] == after["settings"]
    status, manual = await call(service, "PATCH", "/v1/controller", {"manual_interval_s": 2.5})
    assert (status, manual["terms"]["mode"], manual["terms"]["interval_s"]) == (200, "manual", 2.5)


async def test_status_reports_the_pipeline(service: Service) -> None:
    status, body = await call(service, "GET", "/v1/status")
    assert status == 200
    assert body["workload"] == "ntt"
    assert set(body["queues"]) >= {"backlog", "synthesizing", "ready", "proving"}
    assert body["memory"]["budget_bytes"] == 64 * 2**30
    assert body["gpus"][0]["gpu"] == 0
    assert body["controller"]["terms"]["mode"] in ("bootstrap", "pacing", "drained")
    # The CPU workload, with Numba (a dev dependency) taken by PACER_NTT__KERNEL=auto.
    assert body["synthesis"] == {"executor": "threads", "kernel": "numba", "restarts": 0}
