"""How a synthesis's measured time divides: the processes' share and the hand-off."""

from __future__ import annotations

import pytest

from pacer.control.handoff import Handoff
from pacer.control.policy import SynthesisParts


def test_nothing_is_known_before_a_synthesis_is_measured() -> None:
    h = Handoff()
    assert (h.known, h.process_share, h.trip_s) == (False, None, 0.0)


def test_the_trip_out_is_averaged_only_over_syntheses_that_found_a_thread_free() -> None:
    h = Handoff()
    for i in range(100):
        # Every other synthesis waited 2 s for a thread: its trip out is not known.
        out = 0.1 if i % 2 else None
        h.observe(3.2 if out is None else 1.2, SynthesisParts(1.0, 0.1, out))
    assert h.trip_s == pytest.approx(0.2)
    assert h.process_share == pytest.approx(1.0 / 2.2, rel=0.05)


def test_a_new_level_is_followed_within_a_few_windows() -> None:
    h = Handoff()
    for _ in range(200):
        h.observe(1.5, SynthesisParts(1.0, 0.25, 0.25))
    for _ in range(6 * Handoff.SAMPLES):
        h.observe(1.1, SynthesisParts(1.0, 0.05, 0.05))
    assert h.trip_s == pytest.approx(0.1, rel=0.05)
    assert h.process_share == pytest.approx(1.0 / 1.1, rel=0.02)


def test_a_time_in_the_slot_alone_gives_the_share_and_no_trip() -> None:
    # An engine over the protocol: the whole time and its part in a slot, no trips.
    h = Handoff()
    for _ in range(10):
        h.observe(4.0, SynthesisParts(compute_s=1.0))
    assert (h.known, h.process_share, h.trip_s) == (False, 0.25, 0.0)
