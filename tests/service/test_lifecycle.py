"""Start-up and upkeep of an in-process service: warm restarts, saved estimates, retention."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pacer.config import Settings
from pacer.journal import Journal
from pacer.service import commits
from pacer.service.lifecycle import Service
from pacer.workload import NoopWorkload, PartitionSpec, Proof, Workload
from tests.servers import settings_for, until_completed
from tests.waits import until

pytestmark = pytest.mark.asyncio


async def test_restart_starts_warm_from_saved_estimates(tmp_path: Path) -> None:
    first = Service.build(settings_for(tmp_path), CollectorRegistry())
    await first.start()
    await until_completed(first, (await first.submit(6, {}, 0)).id)
    await first.shutdown()
    assert first.controller.bootstraps == 1

    second = Service.build(settings_for(tmp_path), CollectorRegistry())
    await second.open()
    assert second.controller.estimates.known  # read back from the journal
    await second.start()
    await until_completed(second, (await second.submit(6, {}, 0)).id)
    await second.shutdown()
    assert (second.controller.bootstraps, second.controller.rebootstraps) == (0, 1)


async def test_restart_on_other_cores_or_another_size_starts_cold(tmp_path: Path) -> None:
    first = Service.build(settings_for(tmp_path, PACER_SYNTHESIS__CORES="4"), CollectorRegistry())
    await first.start()
    await until_completed(first, (await first.submit(6, {}, 0)).id)
    await first.shutdown()
    with Journal(tmp_path / "journal.sqlite") as journal:
        saved_key = journal.load_estimates_key()
    assert saved_key == first.plan.estimates_key
    # Estimates saved for 4 cores, or for partitions of 2^8, describe another regime.
    for env in ({"PACER_SYNTHESIS__CORES": "8"}, {"PACER_NTT__LOG_N": "9"}):
        other = Service.build(settings_for(tmp_path, **env), CollectorRegistry())
        await other.open()
        assert other.plan.estimates_key != saved_key
        assert not other.controller.estimates.known
        await other.shutdown()
    same = Service.build(settings_for(tmp_path, PACER_SYNTHESIS__CORES="4"), CollectorRegistry())
    await same.open()
    assert same.controller.estimates.known
    await same.shutdown()


async def test_upkeep_saves_estimates_and_prunes_finished_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commits, "UPKEEP_S", 0.0)
    svc = Service.build(
        settings_for(tmp_path, PACER_JOURNAL__RETENTION_S="0.05"), CollectorRegistry()
    )
    await svc.start()
    job = await svc.submit(3, {}, 0)
    # It completes, then ages out of the retention and is pruned.
    await until(lambda: svc.db(svc.journal.get_job, job.id), f"job {job.id} to be pruned",
                done=lambda record: record is None)  # fmt: skip
    assert await svc.db(svc.journal.load_estimates) is not None  # saved while running
    await svc.shutdown()


class Silent(Workload):
    """A workload that does not say how many threads its synthesis keeps busy: the noop
    workload's work, the contract's default for the rest."""

    name = "silent"

    def __init__(self) -> None:
        self._noop = NoopWorkload()

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._noop.check_params(params)

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return self._noop.partition_bytes(params)

    def synthesize(self, spec: PartitionSpec) -> Any:
        return self._noop.synthesize(spec)

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        return self._noop.prove(buffers, worker, keep_output)

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        return self._noop.verify(spec, buffers, proof)


def silent_workload(settings: Settings) -> Silent:
    return Silent()


@pytest.mark.parametrize(
    ("workload", "threads", "expected"),
    [
        ("ntt", None, 12),  # the workload's synthesis is one thread
        ("ntt", 4, 3),
        ("tests.service.test_lifecycle:silent_workload", None, 3),  # four, unless told
    ],
    ids=["from-workload", "from-setting", "default"],
)
async def test_synthesis_concurrency_follows_the_threads_one_synthesis_keeps_busy(
    tmp_path: Path, workload: str, threads: int | None, expected: int
) -> None:
    settings = Settings(
        workload=workload,
        synthesis={"cores": 12, "threads_per_synthesis": threads},
        ntt={"log_n": 8},
        journal={"path": tmp_path / "journal.sqlite"},
    )
    service = Service.build(settings, CollectorRegistry())
    await service.open()
    assert service.plan.caps.synthesis_concurrency == expected
    await service.shutdown()
