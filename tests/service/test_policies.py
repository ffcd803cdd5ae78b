"""The service under each dispatch policy (PACER_CONTROLLER__POLICY): pi, and the unpaced,
cuzk and cuzk-default baselines it is compared with. In-process services over real HTTP, and
`pacer serve` as a real process."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry, generate_latest

from pacer.__main__ import main
from pacer.control.controller import POLICY_FIXED
from pacer.control.policy import Mode, PolicyConflictError
from pacer.journal import Journal
from pacer.server import Server
from pacer.service import commits
from pacer.service.lifecycle import Service
from tests.servers import ServerFactory, call, settings_for, until_completed, until_done
from tests.tiers import starts_something
from tests.waits import wait_until

POLICIES = ["pi", "unpaced", "cuzk", "cuzk-default"]
BASELINES = ["unpaced", "cuzk", "cuzk-default"]
NOOP = {"PACER_WORKLOAD": "noop"}
# (policy, jobs, partitions a job). cuzk bootstraps one partition every 3 s: one partition
# shows it proving end to end without waiting for its pacing.
RUNS = [("pi", 2, 4), ("unpaced", 2, 4), ("cuzk", 1, 1), ("cuzk-default", 2, 4)]


def noop_service(tmp_path: Path, policy: str) -> Server:
    settings = settings_for(tmp_path, **NOOP, PACER_CONTROLLER__POLICY=policy)
    return Server(Service.build(settings, CollectorRegistry()))


@pytest_asyncio.fixture(params=BASELINES)
@starts_something
async def baseline(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    svc = noop_service(tmp_path, request.param)
    await svc.start()
    yield svc
    await svc.shutdown()


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize(("policy", "jobs", "partitions"), RUNS, ids=[r[0] for r in RUNS])
async def test_each_policy_proves_jobs_end_to_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, jobs: int, partitions: int
) -> None:
    svc = noop_service(tmp_path, policy)
    with caplog.at_level(logging.INFO, logger="pacer.service"):
        await svc.start()
    try:
        assert re.search(rf"pacer ready on .* \(workload noop, policy {policy}, ", caplog.text)
        ids = []
        for _ in range(jobs):
            status, body = await call(svc, "POST", "/v1/jobs", {"partitions": partitions})
            assert status == 202
            ids.append(body["id"])
        for job_id in ids:
            job = await until_done(svc, job_id)
            assert (job["state"], job["partitions_done"]) == ("completed", partitions)
        value = svc.service.registry.get_sample_value
        assert value("pacer_controller_policy_info", {"policy": policy}) == 1
        assert value("pacer_partitions_total", {"outcome": "completed"}) == jobs * partitions
        assert value("pacer_gpu_busy_seconds_total", {"gpu": "0"}) is not None
        modes = [value("pacer_controller_mode", {"mode": m}) or 0.0 for m in Mode]
        assert sorted(modes) == [0, 0, 0, 1]
        # The PI terms are exported under pi only; a baseline leaves them absent.
        assert (value("pacer_controller_error") is not None) == (policy == "pi")
        status, body = await call(svc, "GET", "/v1/status")
        assert (status, body["controller"]["policy"]) == (200, policy)
        assert body["controller"]["bootstraps"] == svc.service.policy.bootstraps
    finally:
        assert await svc.shutdown()


@pytest.mark.asyncio
async def test_retune_and_manual_mode_under_a_baseline_answer_409(baseline: Server) -> None:
    policy = baseline.service.policy_name
    _, before = await call(baseline, "GET", "/v1/controller")
    for body, rule in [
        ({"kp": 0.9}, "only the pi policy can be retuned"),
        ({"kp": 0.9, "manual_interval_s": 2.0}, "only the pi policy can be retuned"),
        ({"manual_interval_s": 2.0}, "only the pi policy has a manual mode"),
        ({"manual_interval_s": None}, "only the pi policy has a manual mode"),
    ]:
        status, error = await call(baseline, "PATCH", "/v1/controller", body)
        assert (status, error) == (409, {"error": f"controller.policy is {policy}: {rule}"})
    status, after = await call(baseline, "GET", "/v1/controller")
    assert status == 200
    assert after == before
    assert set(after) == {"policy", "mode", "interval_s", "bootstraps", "rebootstraps"}
    assert (after["policy"], after["mode"]) == (policy, "drained")
    with pytest.raises(PolicyConflictError, match=f"controller.policy is {policy}: only the pi"):
        baseline.service.controller  # noqa: B018 - the property is what is tested


@pytest.mark.asyncio
async def test_baseline_exposition_names_the_policy_and_passes_promtool(
    baseline: Server, promtool: str
) -> None:
    text = generate_latest(baseline.service.registry)
    assert (
        f'pacer_controller_policy_info{{policy="{baseline.service.policy_name}"}} 1.0'
        in text.decode()
    )
    assert baseline.service.registry.get_sample_value("pacer_controller_interval_seconds") == (
        baseline.service.policy.interval_s()
    )
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


@pytest.mark.asyncio
async def test_policy_cannot_change_at_run_time(server: Server) -> None:
    status, error = await call(server, "PATCH", "/v1/controller", {"policy": "unpaced"})
    assert (status, error) == (422, {"error": POLICY_FIXED, "field": "policy"})
    with pytest.raises(ValueError, match="cannot be retuned"):
        server.service.controller.retune(policy="cuzk")
    assert server.service.controller.settings.policy == "pi"


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_baseline_run_keeps_the_estimates_pi_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_path = tmp_path / "journal.sqlite"
    pi = noop_service(tmp_path, "pi")
    await pi.start()
    await until_completed(pi.service, (await pi.service.submit(4, {}, 0)).id)
    await pi.shutdown()
    with Journal(journal_path) as journal:
        saved = journal.load_estimates()
    assert saved is not None

    monkeypatch.setattr(commits, "UPKEEP_S", 0.0)  # upkeep at every commit
    unpaced = noop_service(tmp_path, "unpaced")
    await unpaced.start()
    await until_completed(unpaced.service, (await unpaced.service.submit(4, {}, 0)).id)
    assert await unpaced.shutdown()
    with Journal(journal_path) as journal:
        assert journal.load_estimates() == saved

    warm = noop_service(tmp_path, "pi")
    await warm.service.open()
    assert warm.service.controller.estimates.known
    await warm.shutdown()


@pytest.mark.parametrize("policy", POLICIES)
def test_serve_runs_and_reports_each_policy(
    server_factory: ServerFactory, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    server = server_factory(**NOOP, PACER_CONTROLLER__POLICY=policy).start()
    job_id = server.client.submit(1)
    wait_until(lambda: server.client.job(job_id)["state"] == "completed", "the job to complete")
    assert f"(workload noop, policy {policy}, " in server.log
    assert f'pacer_controller_policy_info{{policy="{policy}"}} 1.0' in server.metrics_text()
    assert main(["status", "--url", f"http://127.0.0.1:{server.port}"]) == 0
    out = capsys.readouterr().out
    expected = policy if policy == "pi" else f"{policy} (baseline): "
    assert re.search(rf"^policy +{re.escape(expected)}", out, flags=re.M), out
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
