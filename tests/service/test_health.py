"""Liveness and readiness of an in-process service over real HTTP: a dispatch loop that fails
is restarted and /readyz names it while it is down; a pipeline that stops making progress with
work waiting is not ready until it moves again; /healthz stays up through both."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from pacer.config import Settings
from pacer.control.policy import Decision, DispatchPolicy, Mode, Observation, SynthesisParts
from pacer.server import Server
from pacer.service.lifecycle import Service
from pacer.workload import NoopWorkload, PartitionSpec
from tests.conftest import FakeClock
from tests.servers import settings_for, until_completed
from tests.waits import until

pytestmark = pytest.mark.asyncio


async def get(server: Server, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.port}{path}") as response,
    ):
        if response.content_type == "application/json":
            return response.status, await response.json()
        return response.status, await response.text()


class FailsFirstDecision:
    """A dispatch policy that raises on its first decision, then is ``inner``."""

    def __init__(self, inner: DispatchPolicy) -> None:
        self.inner = inner
        self.decisions = 0

    @property
    def mode(self) -> Mode:
        return self.inner.mode

    @property
    def bootstraps(self) -> int:
        return self.inner.bootstraps

    @property
    def rebootstraps(self) -> int:
        return self.inner.rebootstraps

    def observe_gpu_service(self, seconds: float) -> None:
        self.inner.observe_gpu_service(seconds)

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        self.inner.observe_synthesis(seconds)

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        self.inner.observe_synthesis_failure(elapsed_s)

    @property
    def synthesis_workers(self) -> int | None:
        return self.inner.synthesis_workers

    def decide(self, obs: Observation) -> Decision:
        self.decisions += 1
        if self.decisions == 1:
            raise RuntimeError("the policy failed")
        return self.inner.decide(obs)

    def interval_s(self) -> float:
        return self.inner.interval_s()


class HeldSleep:
    """The supervisor's backoff wait, held until ``release`` is set."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.entered.set()
        await self.release.wait()


@pytest.mark.slow
async def test_a_failed_dispatch_loop_is_unready_then_restarted_and_jobs_complete(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    svc = Server(Service.build(settings_for(tmp_path), registry))
    await svc.service.open()
    svc.service.pipeline.controller = FailsFirstDecision(svc.service.pipeline.controller)
    held = svc.service.supervisor.sleep = HeldSleep()
    try:
        await svc.start()
        await asyncio.wait_for(held.entered.wait(), 10)
        status, body = await get(svc, "/readyz")
        reason = "task dispatch down after RuntimeError('the policy failed'): restarting in"
        assert status == 503
        [given] = body["reasons"]
        assert given.startswith(reason)
        assert body["error"] == given
        assert (await get(svc, "/healthz"))[0] == 200  # alive all along
        assert registry.get_sample_value("pacer_ready") == 0.0
        job = await svc.service.submit(
            6, {}, 0
        )  # accepted while the loop is down, run once it is back

        held.release.set()

        async def ready() -> bool:
            return (await get(svc, "/readyz")) == (200, {"status": "ready"})

        await until(ready, "/readyz to answer 200 after the restart")
        await until_completed(svc.service, job.id)
        assert held.waits == [0.1]
        labels = {"task": "dispatch"}
        assert registry.get_sample_value("pacer_task_failures_total", labels) == 1.0
        assert registry.get_sample_value("pacer_ready") == 1.0
        [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert record.getMessage().startswith("task dispatch failed (1 in a row)")
        assert record.exc_info is not None  # with its traceback
    finally:
        await svc.shutdown()
    assert svc.service.supervisor.failures()["dispatch"] == 1  # shutting down is no failure


@pytest.mark.slow
async def test_every_task_is_supervised_and_shutdown_counts_no_failure(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    svc = Server(Service.build(settings_for(tmp_path, PACER_GPU__WORKERS="2"), registry))
    await svc.start()
    job = await svc.service.submit(4, {}, 0)
    await until_completed(svc.service, job.id)
    status, body = await get(svc, "/v1/status")
    assert status == 200
    assert (body["ready"], body["reasons"]) == (True, [])
    assert body["health"]["task_failures"] == {
        "dispatch": 0, "journal": 0, "upkeep": 0, "call-watchdog": 0, "journal-watch": 0,
        "prove-0": 0, "prove-1": 0,
    }  # fmt: skip
    # Proving threads report their failures to the supervisor (where the pipeline has the hook).
    assert svc.service.pipeline.on_task_failure == svc.service.supervisor.record_failure
    await svc.shutdown()
    assert set(svc.service.supervisor.failures().values()) == {0}
    for task in ("dispatch", "journal", "upkeep", "call-watchdog", "journal-watch", "prove-0",
                 "prove-1"):  # fmt: skip
        assert registry.get_sample_value("pacer_task_failures_total", {"task": task}) == 0.0


@pytest.mark.slow
async def test_a_short_task_that_raises_is_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    svc = Server(Service.build(settings_for(tmp_path), registry))
    await svc.start()
    try:

        async def broken() -> None:
            raise RuntimeError("lost")

        svc.service.jobs._spawn(broken())
        await until(lambda: not svc.service.jobs._tasks, "the short task to end")
        assert registry.get_sample_value("pacer_task_failures_total", {"task": "requeue"}) == 1.0
        (record,) = [r for r in caplog.records if r.getMessage().startswith("requeue failed")]
        assert record.exc_info is not None
    finally:
        await svc.shutdown()


@pytest.mark.parametrize("event", ["synthesized", "proved"])
async def test_syntheses_and_proofs_are_progress_and_still_reach_the_metrics(
    tmp_path: Path, event: str
) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    svc = Server(Service.build(settings_for(tmp_path), registry, clock))
    await svc.service.open()
    clock.advance(100.0)
    observer = svc.service.pipeline.observer
    assert observer is not None
    if event == "synthesized":
        observer.synthesized(2.0, 0.5)
        seen = registry.get_sample_value("pacer_synthesis_seconds_sum")
    else:
        observer.proved(0, 0.5, {"intt": 0.25})
        seen = registry.get_sample_value(
            "pacer_gpu_phase_seconds_sum", {"gpu": "0", "phase": "intt"}
        )
    assert svc.service.watchdog.since_progress_s() == 0.0
    assert (seen or 0) > 0  # the metrics saw it too
    await svc.shutdown()


class Blocking(NoopWorkload):
    """The noop workload, whose synthesis waits until ``unblock`` is set: a stuck pipeline."""

    name = "blocking"

    def __init__(self) -> None:
        self.unblock = threading.Event()  # not "release": the pipeline calls that one

    def synthesize(self, spec: PartitionSpec) -> Any:
        if not self.unblock.wait(timeout=30):
            raise TimeoutError("synthesis was never released")
        return super().synthesize(spec)


def blocking_workload(settings: Settings) -> Blocking:
    return Blocking()


@pytest.mark.slow
async def test_a_stalled_pipeline_is_unready_until_it_moves_again(tmp_path: Path) -> None:
    stall_s = 0.3
    registry = CollectorRegistry()
    settings = settings_for(
        tmp_path,
        PACER_WORKLOAD="tests.service.test_health:blocking_workload",
        PACER_HEALTH__STALL_S=str(stall_s),
    )
    svc = Server(Service.build(settings, registry))
    await svc.service.open()
    workload = svc.service.workload
    assert isinstance(workload, Blocking)
    try:
        await svc.start()
        assert (await get(svc, "/readyz"))[0] == 200
        submitted = time.monotonic()
        job = await svc.service.submit(3, {}, 0)

        async def stalled() -> bool:
            return (await get(svc, "/readyz"))[0] == 503

        await until(stalled, "/readyz to report the stall")
        assert time.monotonic() - submitted >= stall_s
        status, body = await get(svc, "/readyz")
        assert status == 503
        [reason] = body["reasons"]
        assert reason.startswith("stalled: work waiting and no progress for ")
        assert reason.endswith(f"s (limit {stall_s:g} s)")
        assert (await get(svc, "/healthz")) == (200, {"status": "alive"})
        assert registry.get_sample_value("pacer_stalled") == 1.0
        assert registry.get_sample_value("pacer_ready") == 0.0
        assert (registry.get_sample_value("pacer_last_progress_seconds") or 0) >= stall_s
        status, body = await get(svc, "/v1/status")
        assert (status, body["ready"]) == (200, False)
        assert body["reasons"][0].startswith("stalled: ")

        workload.unblock.set()
        await until_completed(svc.service, job.id)
        assert (await get(svc, "/readyz")) == (200, {"status": "ready"})
        assert registry.get_sample_value("pacer_stalled") == 0.0
        assert set(svc.service.supervisor.failures().values()) == {0}  # a stall is not a failure
    finally:
        workload.unblock.set()
        await svc.shutdown()
