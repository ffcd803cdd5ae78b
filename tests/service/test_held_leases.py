"""The leases a host holds, on a virtual clock: the gate a GPU passes gives the lease (batch and
token) before its deadline and nothing after, or for a partition no lease covers; what it
refused is queued again by a renewal that kept the lease, and left to the fleet otherwise."""

from __future__ import annotations

from pacer.ranges import IndexRanges
from pacer.service.held_leases import Held, HeldLeases
from tests.conftest import FakeClock


def leases_of(clock: FakeClock) -> HeldLeases:
    leases = HeldLeases(clock)
    leases.hold(7, Held("job-a", IndexRanges([(0, 4)]), token=70, deadline=30.0))
    leases.hold(8, Held("job-b", IndexRanges([(0, 2)]), token=80, deadline=30.0))
    return leases


def test_the_gate_gives_the_lease_before_its_deadline_and_nothing_after(clock: FakeClock) -> None:
    leases = leases_of(clock)
    assert leases.gate("job-a", 3) == (7, 70)
    assert leases.gate("job-a", 4) is None  # no lease covers it
    assert leases.gate("job-c", 0) is None
    clock.advance(30.0)  # frozen, or the database out of reach, a whole lease
    assert leases.gate("job-a", 0) is None
    leases.renewed({70}, deadline=60.0)  # by token
    assert leases.gate("job-a", 0) == (7, 70)
    assert leases.gate("job-b", 0) is None  # not renewed


def test_a_renewal_queues_again_what_it_kept_and_leaves_the_rest(clock: FakeClock) -> None:
    leases = leases_of(clock)
    clock.advance(31.0)
    for job, index in [("job-a", 1), ("job-a", 2), ("job-b", 0)]:
        assert leases.gate(job, index) is None
        leases.set_aside(job, index)
    leases.drop(8)  # the renewal did not return job-b's lease: another host took it
    leases.renewed({70}, deadline=61.0)
    back, dropped = leases.take_back()
    assert back == {"job-a": IndexRanges([(1, 3)])}
    assert dropped == 1
    assert leases.take_back() == ({}, 0)  # taken once
    assert leases.partitions() == 4


def test_a_run_claimed_again_is_proved_and_committed_under_its_newest_lease(
    clock: FakeClock,
) -> None:
    """A host that lost a lease and claimed part of its run again holds both until the next
    renewal drops the lost one: the gate gives the newest lease within its deadline, and a
    result is committed under the newest lease whatever its deadline."""
    leases = leases_of(clock)
    clock.advance(31.0)  # lease 7 lapsed; another host took its head, this one the rest
    leases.hold(9, Held("job-a", IndexRanges([(2, 4)]), token=95, deadline=61.0))
    assert leases.gate("job-a", 3) == (9, 95)  # not refused for the lapsed lease beside it
    assert leases.gate("job-a", 1) is None
    assert leases.lease_of("job-a", 3) == (9, 95)
    assert leases.lease_of("job-a", 1) == (7, 70)  # the database judges whether it holds
    assert leases.lease_of("job-c", 0) is None
    leases.hold(7, Held("job-a", IndexRanges([(0, 2)]), token=99, deadline=61.0))
    assert leases.gate("job-a", 1) == (7, 99)
