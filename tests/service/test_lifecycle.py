"""Start-up and upkeep of an in-process service: warm restarts, saved estimates, retention."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pacer import service as service_module
from pacer.journal import JobState
from pacer.service import Service
from tests.service.conftest import settings_for

pytestmark = pytest.mark.asyncio


async def finish(svc: Service, job_id: str) -> None:
    for _ in range(1000):
        job = await svc.db(svc.journal.get_job, job_id)
        if job is None or job.state is JobState.COMPLETED:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("job did not complete")


async def test_restart_starts_warm_from_saved_estimates(tmp_path: Path) -> None:
    first = Service(settings_for(tmp_path), CollectorRegistry())
    await first.start()
    await finish(first, (await first.submit(6, {}, 0)).id)
    await first.shutdown()
    assert first.controller.bootstraps == 1

    second = Service(settings_for(tmp_path), CollectorRegistry())
    assert second.controller.estimates.known  # read back from the journal
    await second.start()
    await finish(second, (await second.submit(6, {}, 0)).id)
    await second.shutdown()
    assert (second.controller.bootstraps, second.controller.rebootstraps) == (0, 1)


async def test_upkeep_saves_estimates_and_prunes_finished_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "UPKEEP_S", 0.0)
    svc = Service(settings_for(tmp_path, PACER_JOURNAL__RETENTION_S="0.05"), CollectorRegistry())
    await svc.start()
    job = await svc.submit(3, {}, 0)
    for _ in range(1000):  # completes, then ages out of the retention and is pruned
        if await svc.db(svc.journal.get_job, job.id) is None:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("finished job was not pruned")
    assert await svc.db(svc.journal.load_estimates) is not None  # saved while running
    await svc.shutdown()
