"""CPU time pacer spends on one engine event: the session's work (parse, apply, answer)
with the controller deciding on every event, against answering by `EngineSession.answer`
(the controller decides when due or when an event changes its inputs).

    python -m bench.engine_events [--partitions 5000] [--repeats 5]

A session on a virtual clock takes a stream of partitions (dispatched, synthesis_ready,
gpu_started, gpu_finished; an event every 0.5 ms, 2 GPU workers), with a large backlog
(the controller pacing) and with none (drained). Ways run interleaved (A B A B ...); the
table has the mean CPU µs per event of the runs and their 95 % interval.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from bench.stats import interval
from pacer.cli.table import render
from pacer.config import ControllerSettings
from pacer.engine.protocol import Hello, Shape
from pacer.engine.session import EngineSession

EVENT_GAP_S = 0.0005
WAYS: dict[str, Callable[[EngineSession], dict[str, Any]]] = {
    "decide every event": EngineSession.decide,
    "answer": EngineSession.answer,
}


def frames(partitions: int, backlog: int) -> list[str]:
    """The events of ``partitions`` partitions, after a backlog event, as JSON frames."""
    out = [json.dumps({"type": "backlog", "seq": 1, "partitions": backlog})]
    for p in range(partitions):
        name, worker = f"p{p}", p % 2
        for kind, fields in (
            ("dispatched", {"partition": name}),
            ("synthesis_ready", {"partition": name, "synthesis_s": 0.5}),
            ("gpu_started", {"partition": name, "worker": worker}),
            ("gpu_finished", {"partition": name, "worker": worker, "gpu_s": 0.05}),
        ):
            out.append(json.dumps({"type": kind, "seq": len(out) + 1, **fields}))
    return out


def run(way: Callable[[EngineSession], dict[str, Any]], stream: list[str]) -> tuple[float, int]:
    """CPU µs per event of ``way`` over ``stream``, and the controller's decisions."""
    now = [0.0]
    shape = Shape(2, 1 << 20, 1 << 40, 1 << 20)
    session = EngineSession(Hello("bench", "k", shape), ControllerSettings(), lambda: now[0])
    began = time.process_time()
    for frame in stream:
        now[0] += EVENT_GAP_S
        session.take(frame)
        way(session)
        session.owed = 0  # the stream dispatches by itself: nothing stays owed
    return (time.process_time() - began) / len(stream) * 1e6, session.decisions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=5000, help="partitions a run")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each way")
    args = parser.parse_args(argv)
    rows = []
    for label, backlog in (("pacing", 10**9), ("drained", 0)):
        stream = frames(args.partitions, backlog)
        cost: dict[str, list[float]] = {way: [] for way in WAYS}
        decisions: dict[str, int] = {}
        for _ in range(args.repeats):
            for way, call in WAYS.items():
                micros, decisions[way] = run(call, stream)
                cost[way].append(micros)
        for way, values in cost.items():
            mean, half = interval(values)
            rows.append([label, way, len(stream), decisions[way],
                         f"{mean:.1f} ± {half:.1f}"])  # fmt: skip
    print(render(["backlog", "way", "events", "decisions", "CPU µs/event"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
