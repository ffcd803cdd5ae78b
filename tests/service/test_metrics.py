"""Metrics on a fresh registry, read with get_sample_value, and the exposition's format."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest
from prometheus_client import generate_latest

from pacer.api.views import controller_state
from pacer.control.controller import PIController
from pacer.server import Server
from tests.servers import call, until_completed

pytestmark = pytest.mark.asyncio

REQUIRED = [
    "pacer_controller_error", "pacer_controller_p_term", "pacer_controller_i_term",
    "pacer_controller_ff_term", "pacer_controller_interval_seconds", "pacer_controller_setpoint",
    "pacer_controller_mode", "pacer_controller_bootstraps_total",
    "pacer_controller_rebootstraps_total", "pacer_backlog_partitions", "pacer_synthesis_inflight",
    "pacer_ready_partitions", "pacer_memory_budget_bytes", "pacer_memory_inflight_bytes",
    "pacer_pinned_pool_total_bytes", "pacer_pinned_pool_in_use_bytes",
    "pacer_pinned_pool_waits_total", "pacer_pinned_pool_fallbacks_total",
    "pacer_synthesis_worker_restarts_total", "pacer_verify_inflight",
    "pacer_verifications_skipped_total",
    "pacer_gpu_busy_ratio", "pacer_gpu_idle_gap_seconds", "pacer_gpu_phase_seconds",
    "pacer_synthesis_busy_ratio", "pacer_synthesis_busy_seconds_total",
    "pacer_synthesis_seconds", "pacer_synthesis_wait_seconds", "pacer_partitions_total",
    "pacer_jobs_total", "pacer_build_info",
    "pacer_controller_policy_info", "pacer_controller_synthesis_cap",
    "pacer_controller_synthesis_supply", "pacer_controller_lead_seconds",
    "pacer_controller_live_floor_seconds", "pacer_controller_slowdown",
    "pacer_controller_held_workers", "pacer_controller_synthesis_hung",
    "pacer_hung_calls_total", "pacer_partition_retries_total", "pacer_abandoned_threads",
    "pacer_memory_abandoned_bytes", "pacer_gpu_workers_live",
    "pacer_journal_healthy",
    "pacer_journal_failing_seconds", "pacer_journal_commit_failures_total",
    "pacer_journal_uncommitted_results", "pacer_job_duration_seconds",
    "pacer_http_request_duration_seconds", "pacer_api_refusals_total",
]  # fmt: skip


async def run_job(server: Server, partitions: int) -> None:
    await until_completed(server.service, (await server.service.submit(partitions, {}, 0)).id)


async def test_metrics_follow_the_work(server: Server) -> None:
    await run_job(server, 6)
    value = server.service.registry.get_sample_value
    assert value("pacer_jobs_total", {"outcome": "completed"}) == 1
    assert value("pacer_partitions_total", {"outcome": "completed"}) == 6
    assert value("pacer_synthesis_seconds_count") == 6
    assert value("pacer_synthesis_wait_seconds_count") == 6
    assert value("pacer_gpu_phase_seconds_count", {"gpu": "0", "phase": "coset_ntt"}) == 6
    assert value("pacer_gpu_idle_gap_seconds_count", {"gpu": "0"}) == 5  # between 6 partitions
    assert value("pacer_controller_bootstraps_total") == 1
    assert value("pacer_memory_budget_bytes") == server.service.plan.budget_bytes
    assert value("pacer_memory_inflight_bytes") == 0
    assert 0 < (value("pacer_gpu_busy_ratio", {"gpu": "0"}) or 0) <= 1
    # The synthesis threads' time inside the six syntheses, each as the pipeline timed it.
    busy_s = value("pacer_synthesis_busy_seconds_total") or 0
    assert 0 < busy_s <= (value("pacer_synthesis_seconds_sum") or 0)
    assert 0 < (value("pacer_synthesis_busy_ratio") or 0) <= 1
    assert value("pacer_controller_mode", {"mode": "drained"}) in (0, 1)
    modes = [value("pacer_controller_mode", {"mode": m}) or 0.0
             for m in ("bootstrap", "pacing", "drained", "manual")]  # fmt: skip
    assert sorted(modes) == [0, 0, 0, 1]


async def test_synthesis_cap_appears_once_a_synthesis_time_is_known(server: Server) -> None:
    value = server.service.registry.get_sample_value
    assert value("pacer_controller_synthesis_cap") is None  # a fresh journal: no estimate yet
    assert value("pacer_controller_synthesis_handoff_seconds") is None
    await run_job(server, 6)
    assert isinstance(server.service.policy, PIController)
    synthesis_s = server.service.policy.estimates.synthesis_s
    assert synthesis_s
    # The cap is the last decision's, a synthesis or two behind the estimate at most: the
    # syntheses at once and the ends that bunch up, over the threads' own time a synthesis,
    # which the pipeline measures (the slots' rate is the syntheses at once over it).
    policy = server.service.policy
    syntheses = server.service.plan.caps.synthesis_concurrency
    expected = (syntheses + policy.ends_bunched()) / syntheses * policy.synthesis_supply_per_s
    assert value("pacer_controller_synthesis_cap") == pytest.approx(expected, rel=0.5)
    # The pipeline measured the hand-off; the queue covers it and the bunched ends.
    handoff = value("pacer_controller_synthesis_handoff_seconds")
    assert handoff is not None
    assert handoff == pytest.approx(policy.synthesis_handoff_s)
    assert value("pacer_controller_synthesis_queue") == policy.synthesis_queue() >= 1
    state = controller_state(server.service)  # the API's too
    assert (state["synthesis_queue"], state["synthesis_handoff_s"]) == (
        policy.synthesis_queue(),
        policy.synthesis_handoff_s,
    )


async def test_synthesis_supply_appears_once_a_synthesis_time_is_known(server: Server) -> None:
    value = server.service.registry.get_sample_value
    assert value("pacer_controller_synthesis_supply") is None  # a fresh journal: no estimate yet
    await run_job(server, 6)
    policy = server.service.policy
    assert isinstance(policy, PIController)
    synthesis_s = policy.estimates.synthesis_s
    assert synthesis_s
    # The synthesis slots over their own time a synthesis: at most T̂syn, which holds the wait
    # for a thread; never above the rate cap, which counts the ends that bunch up as well.
    syntheses = server.service.plan.caps.synthesis_concurrency
    supply, cap = (value(f"pacer_controller_synthesis_{n}") for n in ("supply", "cap"))
    assert supply is not None
    assert cap is not None
    assert supply == pytest.approx(policy.synthesis_supply_per_s)
    assert supply >= syntheses / synthesis_s * 0.99
    assert supply <= cap * 1.01
    assert controller_state(server.service)["synthesis_supply_per_s"] == supply  # the API's too


async def test_verification_in_flight_and_skipped_follow_the_pipeline(server: Server) -> None:
    pipeline = server.service.pipeline
    value = server.service.registry.get_sample_value
    assert value("pacer_verifications_skipped_total") == 0
    pipeline.verifications_skipped = 3
    assert value("pacer_verifications_skipped_total") == 3
    assert value("pacer_verify_inflight") == pipeline.verifying == 0


async def test_exposition_has_every_metric_and_no_created_series(server: Server) -> None:
    await run_job(server, 2)
    text = generate_latest(server.service.registry).decode()
    for name in REQUIRED:
        assert f"\n# TYPE {name} " in "\n" + text, name
    assert "_created" not in text


async def test_exposition_passes_promtool(server: Server, promtool: str) -> None:
    await run_job(server, 2)
    text = generate_latest(server.service.registry)
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


async def test_the_process_and_platform_collectors_are_on_the_service_registry(
    server: Server,
) -> None:
    value = server.service.registry.get_sample_value
    assert (value("process_cpu_seconds_total") or 0) > 0
    assert (value("process_resident_memory_bytes") or 0) > 0
    assert value("python_info", {
        "implementation": platform.python_implementation(), "major": str(sys.version_info[0]),
        "minor": str(sys.version_info[1]), "patchlevel": str(sys.version_info[2]),
        "version": platform.python_version(),
    }) == 1  # fmt: skip
    assert value("python_gc_collections_total", {"generation": "0"}) is not None


async def test_request_durations_are_labelled_by_route_template_and_status(
    server: Server,
) -> None:
    job = await server.service.submit(1, {}, 0)
    assert (await call(server, "GET", f"/v1/jobs/{job.id}"))[0] == 200
    assert (await call(server, "GET", "/v1/jobs/nope-0123"))[0] == 404
    assert (await call(server, "GET", f"/no/such/{job.id}"))[0] == 404
    count = "pacer_http_request_duration_seconds_count"
    value = server.service.registry.get_sample_value
    assert value(count, {"method": "GET", "route": "/v1/jobs/{id}", "status": "200"}) == 1
    assert value(count, {"method": "GET", "route": "/v1/jobs/{id}", "status": "404"}) == 1
    assert value(count, {"method": "GET", "route": "unmatched", "status": "404"}) == 1
    routes = {
        sample.labels["route"]
        for family in server.service.registry.collect()
        if family.name == "pacer_http_request_duration_seconds"
        for sample in family.samples
    }
    assert routes == {"/v1/jobs/{id}", "unmatched"}  # never a raw path


async def test_job_time_from_submission_to_end_is_observed_by_outcome(server: Server) -> None:
    await run_job(server, 3)
    [done] = await server.service.db(server.service.journal.list_jobs)
    value = server.service.registry.get_sample_value
    completed = {"outcome": "completed"}
    assert value("pacer_job_duration_seconds_count", completed) == 1
    assert value("pacer_job_duration_seconds_sum", completed) == pytest.approx(
        done.updated_at - done.created_at
    )
    server.service.pipeline.stop_dispatching()
    queued = await server.service.submit(2, {}, 0)
    await server.service.cancel(queued.id)
    assert value("pacer_job_duration_seconds_count", {"outcome": "cancelled"}) == 1
    assert value("pacer_job_duration_seconds_count", {"outcome": "failed"}) == 0


async def test_no_metric_repeats_its_name_as_a_label(server: Server) -> None:
    await run_job(server, 2)
    for family in server.service.registry.collect():
        for sample in family.samples:
            assert family.name not in sample.labels, sample
    value = server.service.registry.get_sample_value
    modes = [value("pacer_controller_mode", {"mode": m}) for m in ("pacing", "drained")]
    assert sorted(m or 0.0 for m in modes) in ([0.0, 1.0], [0.0, 0.0]), modes
    assert None not in modes  # every mode is a series, 0 or 1
