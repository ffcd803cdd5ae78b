"""Hosts drawn at random, one disturbance class each (`bench.classes`)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench import hung_raise
from bench.classes import CLASSES, describe, draw, draw_arguments, drawn, drawn_hosts
from pacer.sim.scenario import Scenario


@pytest.mark.parametrize("kind", CLASSES)
def test_a_drawn_host_is_gpu_bound_with_room_in_memory(kind: str) -> None:
    for i in range(20):
        sc = draw(kind, np.random.default_rng([7, CLASSES.index(kind), i]), i)
        rate = sc.gpu.workers / sc.gpu.service_s.mean  # partitions a second, of unit work
        synthesis = sc.synthesis.duration_s.mean
        scale = sc.synthesis.phases[0].scale if sc.synthesis.phases else 1.0
        # The slots outpace the GPUs 1.3 times at least, 1.2 times after a slowdown.
        assert sc.synthesis_slots >= 1.2 * rate * synthesis * scale, describe(sc)
        little = rate * (synthesis * scale + sc.gpu.service_s.mean)
        assert sc.memory_slots >= 2 * (little + 8), describe(sc)
        assert sc.total_partitions >= sc.duration_s * rate / sc.jobs.mean_work_scale


def test_each_class_draws_its_disturbance_and_the_same_seed_the_same_host() -> None:
    def host(kind: str) -> str:
        return describe(draw(kind, np.random.default_rng([1, CLASSES.index(kind), 0]), 0))

    assert "slower at" in host("slowdown")
    assert "hung" in host("hung")
    assert "lost" in host("outage")
    assert "work [1.0," in host("bimodal")
    assert "sigma 0.2" not in host("heavy-tail")
    assert host("hung") == host("hung")


def test_hangs_beside_a_class_leave_its_host_as_drawn() -> None:
    def host(kind: str, hangs: int) -> Scenario:
        return draw(kind, np.random.default_rng([1, CLASSES.index(kind), 0]), 0, hangs)

    plain, hung = host("slowdown", 0), host("slowdown", 3)
    budget = f"budget {plain.memory_slots}"
    wanted = describe(plain).replace(budget, f"budget {plain.memory_slots + 3}") + ", 3 hung"
    assert describe(hung) == wanted
    own = host("hung", 0).synthesis.hangs
    both = host("hung", 2).synthesis.hangs
    assert both[: len(own)] == own
    assert len(both) == len(own) + 2
    assert [h.at_s for h in both] == sorted(h.at_s for h in both)


def test_hung_raise_finds_a_drawn_host_by_its_name_with_more_hangs() -> None:
    host = hung_raise.host
    plain, hung = host("heavy-tail-9", 2, 0), host("heavy-tail-9", 2, 4)
    assert plain.name == hung.name == "heavy-tail-9"
    assert len(hung.synthesis.hangs) - len(plain.synthesis.hangs) == 4
    assert hung.memory_slots == plain.memory_slots + 4  # the budget holds the hung ones
    assert describe(plain) == describe(draw("heavy-tail", np.random.default_rng([2, 1, 9]), 9))
    with pytest.raises(ValueError, match="HOST: 'fast-1' is no drawn host"):
        host("fast-1", 2, 0)


def test_the_tools_that_draw_hosts_name_an_unknown_class(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="tool")
    draw_arguments(parser, draws=2, seed=3, classes=("outage",))
    args = parser.parse_args([])
    assert [sc.name for sc in drawn_hosts(parser, args)] == ["outage-0", "outage-1"]
    assert describe(drawn_hosts(parser, args)[1]) == describe(drawn("outage", 1, 3))
    with pytest.raises(SystemExit):
        drawn_hosts(parser, parser.parse_args(["--classes", "outage,fast"]))
    assert "--classes: unknown fast" in capsys.readouterr().err
