"""`bench.fleet commits` on a real PostgreSQL of its own: claimers claim and commit, each row
counts what they committed, and each interval prints what the server did meanwhile."""

from __future__ import annotations

import pytest

from bench import fleet_commits
from pacer.pgjournal import PgJournal
from tests.pgjournal.database import sql

pytestmark = pytest.mark.slow


# Two intervals of 2 s: long enough that a loaded machine still commits in each, and that the
# progress thread, once connected, prints at least once.
SECONDS, INTERVAL = 4.0, 2.0


def test_a_short_row_commits_and_reports_each_interval(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = fleet_commits.rows([2], batch=1, seconds=SECONDS, interval=INTERVAL)
    claimers, batch, rate, *_ = row
    assert (claimers, batch) == (2, 1)
    assert float(str(rate)) > 0
    assert fleet_commits.shown(row)[2] == round(float(str(rate)))
    rates = [int(x) for x in str(row[7]).split()]
    assert len(rates) == 2
    assert all(r > 0 for r in rates)
    err = capsys.readouterr().err.splitlines()
    progress = [line for line in err if "commits/s" in line]
    assert progress, "no progress line"
    assert "dead leases" in progress[0]
    (cpu, *_) = [line for line in err if "server CPU:" in line]
    assert "ms a commit: " in cpu
    assert "backends" in cpu.split("ms a commit: ")[1]  # the claimers' backends are counted


def test_the_statements_that_took_the_server_most_time_are_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fleet_commits.rows([2], batch=1, seconds=SECONDS, interval=INTERVAL, statements=True)
    err = capsys.readouterr().err.splitlines()
    most = [line for line in err if "most time:" in line]
    assert most, "no line of the statements"
    assert "pacer_commit" in most[0]
    assert "pacer_claim" in most[0]
    sessions = [line for line in err if "sessions:" in line]
    assert sessions, "no line of what the sessions did"
    shares = [int(part.rsplit(" ", 2)[1]) for part in sessions[0].split(":", 1)[1].split(",")]
    assert 0 < sum(shares) <= 103  # shares of every sample, each rounded to a whole per cent
    (rows, *_) = [line for line in err if "job rows:" in line]
    assert "jobs " in rows
    assert "job_progress " in rows
    assert "HOT" in rows
    assert " pages, scans " in rows


def test_a_prefill_stores_results_of_another_job(postgres_url: str) -> None:
    with PgJournal.connect(postgres_url) as journal:
        measured = journal.add_job(10, "noop", {})
        fleet_commits.prefill_results(postgres_url, 250)
        jobs = journal.list_jobs()
    (other,) = [job for job in jobs if job.id != measured.id]
    assert (other.partitions, other.state) == (250, "queued")
    assert sql(postgres_url, "SELECT job_id, count(*) FROM partitions GROUP BY job_id") == [
        (other.id, 250)
    ]


def test_claimers_that_reconnect_go_on_committing(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = fleet_commits.rows([2], batch=1, seconds=SECONDS, interval=INTERVAL, reconnect_s=1.0)
    rates = [int(x) for x in str(row[7]).split()]
    assert all(r > 0 for r in rates)
    cpu = [line for line in capsys.readouterr().err.splitlines() if "server CPU:" in line]
    assert any("ended " in line for line in cpu)  # the closed connections' server processes
