"""The service's shape: built without I/O, opened and started explicitly, and free of the HTTP
layer that serves it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpu.reference import cpu_backend
from pacer.journal import JournalInUseError
from pacer.service.lifecycle import Service
from pacer.workload import WorkloadError
from tests.servers import ROOT, settings_for
from tests.waits import until


@pytest.mark.slow
def test_importing_the_service_imports_neither_the_api_nor_the_server() -> None:
    """At run time, as `tests/test_layers.py` checks the source."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import pacer.service as service\n"
        "for module in pkgutil.iter_modules(service.__path__):\n"
        "    importlib.import_module('pacer.service.' + module.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[:2] in "
        "(['pacer', 'api'], ['pacer', 'server'])))\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


OPEN_ON_GPUS = """
import asyncio, sys
from prometheus_client import CollectorRegistry
import gpu.cuda.devices
from pacer.config import Settings
from pacer.service.lifecycle import Service

asked = []  # the driver, faked: two devices
gpu.cuda.devices.device_count = lambda: 2
gpu.cuda.devices.device_name = lambda device: asked.append(device) or "NVIDIA H200"

async def main() -> None:
    service = Service.build(Settings(), CollectorRegistry())
    await service.open()
    plan = service.plan
    print(type(service.workload).__name__, plan.gpu_model, plan.kernel, len(asked))
    print(sorted(name for name in ("cupy", "numba") if name in sys.modules))
    await service.close()

asyncio.run(main())
"""


@pytest.mark.slow
def test_opening_on_gpus_imports_neither_cupy_nor_numba(tmp_path: Path) -> None:
    """Before the pool is pinned, nothing imports CuPy (a second or so on a GPU host) or
    Numba: both load beside the pinning, in `prepare`. The GPUs' model is asked once."""
    fake = tmp_path / "site" / "cupy"
    fake.mkdir(parents=True)  # an importable CuPy, so that importing it would show
    (fake / "__init__.py").write_text('"""Stands in for CuPy: importing it is the fault."""\n')
    path = [str(fake.parent), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path),
           "PACER_JOURNAL__PATH": str(tmp_path / "journal.sqlite"), "PACER_NTT__LOG_N": "27",
           "PACER_NTT__FIELD": "goldilocks", "PACER_SYNTHESIS__EXECUTOR": "processes"}  # fmt: skip
    ran = subprocess.run([sys.executable, "-c", OPEN_ON_GPUS], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    kernel = "numba" if cpu_backend.numba_available() else "numpy"
    assert ran.stdout.splitlines() == [f"GpuNttWorkload NVIDIA H200 {kernel} 2", "[]"]


def test_construction_does_no_io(tmp_path: Path) -> None:
    journal = tmp_path / "nowhere-yet" / "journal.sqlite"
    settings = settings_for(tmp_path, PACER_JOURNAL__PATH=str(journal),
                            PACER_WORKLOAD="no_such_module_xyz:make")  # fmt: skip
    registry = CollectorRegistry()
    threads = set(threading.enumerate())
    service = Service.build(settings, registry)
    assert not journal.parent.exists()  # no journal, no lock file
    # No journal thread, no pool. A thread an earlier test left may end meanwhile: only the
    # threads that began count.
    began = {t.name for t in set(threading.enumerate()) - threads}
    assert not began, f"construction started threads: {sorted(began)}"
    assert list(registry.collect()) == []  # nothing registered yet
    assert service.unready_reasons() == ["starting"]


@pytest.mark.asyncio
async def test_open_takes_the_lock_first_and_a_failed_open_gives_it_back(tmp_path: Path) -> None:
    first = Service.build(settings_for(tmp_path), CollectorRegistry())
    await first.open()
    assert (tmp_path / "journal.sqlite").exists()
    # The lock comes before the workload: a second service names the holder, not its workload.
    unloadable = settings_for(tmp_path, PACER_WORKLOAD="no_such_module_xyz:make")
    with pytest.raises(JournalInUseError):
        await Service.build(unloadable, CollectorRegistry()).open()
    assert await first.shutdown()
    with pytest.raises(WorkloadError):
        await Service.build(unloadable, CollectorRegistry()).open()
    again = Service.build(settings_for(tmp_path), CollectorRegistry())
    await again.open()  # the failed open left the lock free
    await again.shutdown()


@pytest.mark.asyncio
async def test_a_hurried_drain_leaves_in_flight_work_to_the_journal(tmp_path: Path) -> None:
    env = {"PACER_NTT__LOG_N": "14", "PACER_SHUTDOWN__DRAIN_S": "600"}
    service = Service.build(settings_for(tmp_path, **env), CollectorRegistry())
    await service.start()
    job = await service.submit(50, {}, 0)
    # Something in flight, which the drain would wait for.
    await until(lambda: not service.pipeline.idle, "a partition in flight")
    service.hurry()
    assert not await service.shutdown()  # at once, not after the 600 s budget
    assert service.pipeline.backlog > 0
    with_journal = Service.build(settings_for(tmp_path), CollectorRegistry())
    await with_journal.open()
    record = await with_journal.db(with_journal.journal.get_job, job.id)
    assert record is not None
    assert record.partitions_done < 50
    await with_journal.shutdown()
