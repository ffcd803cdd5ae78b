"""A host's own connection to the fleet's database: one pacer per host name (the holder named
in the refusal), the name taken back after a lost connection, word of work heard from any
host; and the fleet's count of partitions left."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from pacer.journal import HostInUseError
from pacer.pgjournal import PgJournal
from tests.journal.stores import proved
from tests.pgjournal.database import terminate
from tests.waits import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def journals(postgres_url: str) -> Iterator[list[PgJournal]]:
    """Journals opened by the test, closed after it."""
    opened: list[PgJournal] = []
    yield opened
    for journal in opened:
        journal.close()


def open_as(url: str, host: str, opened: list[PgJournal]) -> PgJournal:
    opened.append(PgJournal.connect(url, host=host, timeout_s=2))
    return opened[-1]


def drop_host_connections(url: str, host: str) -> None:
    """The server ends the host's own connection, as a restart of the server would: once
    this returns, the name it held is free."""
    assert terminate(url, "application_name LIKE %s", f"pacer {host} %") == 1


def test_a_second_pacer_of_the_same_name_is_refused_naming_the_first(
    postgres_url: str, journals: list[PgJournal]
) -> None:
    first = open_as(postgres_url, "gpu-1", journals)
    first.hold_host()
    second = open_as(postgres_url, "gpu-1", journals)
    with pytest.raises(HostInUseError) as refused:
        second.hold_host()
    assert refused.value.host == "gpu-1"
    assert refused.value.holder.startswith("pacer gpu-1 pid ")
    assert "PACER_JOURNAL__HOST" in str(refused.value)
    open_as(postgres_url, "gpu-2", journals).hold_host()  # another name is free
    first.close()  # the name goes with its connection (as when the host dies), once the
    # server has ended that connection's backend: a moment after the client let go of it.
    wait_until(lambda: taken(second), "the name to be free once its holder closed")


def taken(journal: PgJournal) -> bool:
    """Whether ``journal`` now holds its host's name (False while another pacer holds it)."""
    try:
        journal.hold_host()
    except HostInUseError:
        return False
    return True


def test_word_of_work_comes_from_any_host_on_accepting_and_on_giving_back(
    postgres_url: str, journals: list[PgJournal]
) -> None:
    listener = open_as(postgres_url, "listener", journals)
    listener.hold_host()
    other = open_as(postgres_url, "other", journals)
    assert listener.wait_for_work(0.05) is False
    other.add_job(4, None, {})
    assert listener.wait_for_work(5) is True
    assert listener.wait_for_work(0.05) is False
    assert sum(len(c.pending) for c in other.claim("other", 4)) == 4
    assert listener.wait_for_work(0.05) is False  # a claim frees nothing
    assert other.release("other") == 4
    assert listener.wait_for_work(5) is True
    assert other.release("other") == 0
    assert listener.wait_for_work(0.05) is False  # nothing given back, no word


def test_a_lost_connection_is_opened_again_and_the_name_taken_back(
    postgres_url: str, journals: list[PgJournal]
) -> None:
    journal = open_as(postgres_url, "gpu-1", journals)
    journal.hold_host()
    drop_host_connections(postgres_url, "gpu-1")
    with pytest.raises(psycopg.OperationalError):
        journal.wait_for_work(5)  # the loss shows at the next wait
    assert journal.wait_for_work(0.05) is False  # connected again
    with pytest.raises(HostInUseError):
        open_as(postgres_url, "gpu-1", journals).hold_host()
    open_as(postgres_url, "other", journals).add_job(1, None, {})
    assert journal.wait_for_work(5) is True  # listening again


def test_a_name_taken_while_the_connection_was_lost_is_not_taken_back(
    postgres_url: str, journals: list[PgJournal]
) -> None:
    journal = open_as(postgres_url, "gpu-1", journals)
    journal.hold_host()
    drop_host_connections(postgres_url, "gpu-1")
    usurper = open_as(postgres_url, "gpu-1", journals)
    usurper.hold_host()
    with pytest.raises((psycopg.OperationalError, HostInUseError)):
        journal.wait_for_work(0.05)
    with pytest.raises(HostInUseError):
        journal.wait_for_work(0.05)


def test_waiting_for_work_needs_the_hosts_name(
    postgres_url: str, journals: list[PgJournal]
) -> None:
    with pytest.raises(RuntimeError, match="hold_host"):
        open_as(postgres_url, "gpu-1", journals).wait_for_work(0.01)


def test_the_fleets_partitions_left_count_active_jobs_without_results(
    postgres_url: str, journals: list[PgJournal]
) -> None:
    journal = open_as(postgres_url, "gpu-1", journals)
    assert journal.pending_partitions() == 0
    a = journal.add_job(5, None, {})
    b = journal.add_job(3, None, {})
    journal.complete_partitions([proved(a.id, 0), proved(a.id, 1)])
    assert journal.pending_partitions() == 3 + 3
    journal.cancel(b.id)
    assert journal.pending_partitions() == 3
