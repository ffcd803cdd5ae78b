"""Properties that hold for any sequence of observations, gains and timings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Observation
from tests.conftest import FakeClock

observations = st.builds(
    Observation,
    ready=st.integers(0, 60),
    synthesizing=st.integers(0, 80),
    gpu_busy=st.integers(0, 4),
    gpu_workers=st.integers(1, 4),
    backlog=st.integers(0, 500),
    pool_free=st.one_of(st.none(), st.integers(0, 40)),
    budget_free=st.one_of(st.none(), st.integers(0, 40)),
)
gains = st.fixed_dictionaries(
    {
        "kp": st.floats(0, 10),
        "ki": st.floats(0, 1),
        "target_ready": st.floats(0.5, 40),
        "interval_min_s": st.floats(0.01, 1),
        "integral_max": st.floats(0, 200),
        "integral_min": st.floats(-200, 0),
    }
)
steps = st.lists(
    st.tuples(
        observations,
        st.floats(0, 30),  # seconds until this observation
        st.one_of(st.none(), st.floats(0.01, 20)),  # a GPU service time observed
        st.one_of(st.none(), st.floats(0.1, 120)),  # a synthesis duration observed
    ),
    min_size=1,
    max_size=60,
)
caps = st.builds(Caps, st.integers(1, 64), st.integers(1, 120))
warm = st.one_of(st.none(), st.builds(Estimates, st.floats(0.01, 20), st.floats(0.1, 120)))


@settings(max_examples=150, deadline=None)
@given(gains=gains, caps=caps, estimates=warm, steps=steps)
def test_invariants(
    gains: dict[str, float],
    caps: Caps,
    estimates: Estimates | None,
    steps: list[tuple[Observation, float, float | None, float | None]],
) -> None:
    clock = FakeClock()
    s = ControllerSettings(**gains)
    c = PIController(s, caps, clock, estimates)
    for obs, wait, gpu, syn in steps:
        clock.advance(wait)
        if gpu is not None:
            c.observe_gpu_service(gpu)
        if syn is not None:
            c.observe_synthesis(syn)
        d = c.decide(obs)
        t = c.terms
        # The interval never exceeds its limit (its floor bounds wake-ups, not the rate).
        assert 0 <= t.interval_s <= s.interval_max_s
        # In flight never goes above the caps (syntheses: the processes and the queue in
        # front of them, at most as many), nor dispatch above the work waiting.
        assert 0 <= d.dispatch <= obs.backlog
        assert 0 <= c.synthesis_queue() <= caps.synthesis_concurrency
        if d.dispatch:
            assert obs.synthesizing + d.dispatch <= caps.synthesis_concurrency + c.synthesis_queue()
            assert obs.inflight + d.dispatch <= caps.inflight_partitions
            for free in (obs.pool_free, obs.budget_free):
                if free is not None:
                    assert d.dispatch <= free
        # The integral stays bounded.
        assert s.integral_min <= c.integral <= s.integral_max
        assert d.next_at is None or d.next_at >= clock.now


@settings(max_examples=80, deadline=None)
@given(steps=steps, changes=gains)
def test_retune_never_breaks_bounds(
    steps: list[tuple[Observation, float, float | None, float | None]],
    changes: dict[str, float],
) -> None:
    clock = FakeClock()
    c = PIController(ControllerSettings(), Caps(48, 50), clock, Estimates(1.8, 30.0))
    for obs, wait, *_ in steps:
        clock.advance(wait)
        c.decide(obs)
    new = c.retune(**changes)
    assert new.integral_min <= c.integral <= new.integral_max
