"""One run read closely (`bench.terms`): the stretches add up to the run's own busy ratio, the
drawn host of D218 keeps T̂syn at its true level, and bad arguments are named."""

from __future__ import annotations

import pytest

from bench.terms import drawn_host, main, stretches, terms_rows
from pacer.config import Settings
from pacer.sim.engine import Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.report import summarize


def test_the_stretches_cover_the_run_and_its_idle_time() -> None:
    scenario = drawn_host("bimodal:5:0")
    raw = Simulation(scenario, "pi", policy_factory("pi", scenario, Settings())).run()
    parts = stretches(raw, 8)
    assert len(parts) == 8
    assert parts[0].start_s == pytest.approx(raw.trace.t[0])
    assert parts[-1].end_s == pytest.approx(raw.trace.t[-1])
    for part in parts:
        assert 0.0 <= part.idle <= 1.0
        assert part.least_ready <= part.ready
        assert part.synthesizing <= part.inflight
    # Idle is counted as the run's busy ratio counts it: where every GPU worker stays live
    # and work is outstanding throughout, the stretches weigh back to it.
    idle = sum(p.idle * (p.end_s - p.start_s) for p in parts) / (parts[-1].end_s - parts[0].start_s)
    assert 1 - idle == pytest.approx(summarize(raw).gpu_busy_ratio, abs=0.002)
    with pytest.raises(ValueError, match="stretches must be >= 1"):
        stretches(raw, 0)


def test_a_burst_after_the_cold_start_leaves_the_synthesis_estimate_whole() -> None:
    # Seed 5's bimodal-0 (RESULTS "a faster synthesis level after a burst of dispatch"):
    # partitions of 1x and 5x the work, 1:1, 4.55 s a synthesis of 1x, a mean of 13.65 s.
    # Before D218 T̂syn fell to the small ones' 5.05 s at 71 s, once the cold cohort was in.
    scenario = drawn_host("bimodal:5:0")
    rows, _ = terms_rows(scenario, Settings(), every_s=1.0)
    pacing = [float(r[2]) for r in rows if r[1] == "pacing"]
    assert pacing
    assert min(pacing) > 9.0


@pytest.mark.parametrize(
    "spec", ["bimodal", "bimodal:5", "flat:5:0", "bimodal:x:0", "bimodal:5:-1"]
)
def test_a_drawn_host_not_of_the_form_is_named(spec: str) -> None:
    with pytest.raises(ValueError, match="--drawn: CLASS:SEED:INDEX"):
        drawn_host(spec)


def test_the_command_prints_both_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--drawn", "bimodal:5:0", "--stretches", "3", "--policies", "pi,unpaced"]) == 0
    out = capsys.readouterr().out
    assert out.count("\npi ") == 3
    assert out.count("\nunpaced ") == 3
    assert "T̂syn s" in out
    assert "pacing" in out
    for argv in ([], ["steady-backlog", "--drawn", "bimodal:5:0"], ["steady-backlog",
                 "--stretches", "0"], ["steady-backlog", "--policies", "nope"]):  # fmt: skip
        with pytest.raises(SystemExit):
            main(argv)
    assert "--policies" in capsys.readouterr().err
