"""A reference engine paced by pacer only through the engine protocol.

It runs a host model in real time: ``--partitions`` partitions, each synthesized in one of
``--slots`` synthesis slots (lognormal around ``--synthesis-s``) and then proved on one of
``--gpu-workers`` GPU workers (``--gpu-s`` each), its memory held from dispatch to the end of
its GPU work, never more than ``--budget`` partitions at once. It dispatches only what pacer's
decisions say; while pacer is away, from the start or later, it follows its declared fallback,
reconnects and resumes. Only a refusal of its hello ends it.
It ends with one line: GPU busy, mean and peak partitions in flight, seconds taken.

    python examples/engine.py --url ws://127.0.0.1:9470/v1/engine --partitions 200

It imports nothing of pacer but its reference client (`pacer/engine/client.py`, which itself
imports only aiohttp): an engine in another language does the same with its own.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from pacer.engine.client import EngineClient, EngineRefusedError

GIB = 1 << 30
RECONNECT_S = 0.5
# What the reference client raises where pacer is away, starting, or closes before its welcome.
AWAY = (OSError, TimeoutError, aiohttp.ClientError)
FALLBACK_TICK_S = 0.05


class Advisor(Protocol):
    """Where decisions come from: pacer through the protocol (`EngineClient`), or, for a
    comparison, the same session logic in the engine's own process."""

    decisions: asyncio.Queue[dict[str, Any]]

    @property
    def connected(self) -> bool: ...

    async def event(self, kind: str, **fields: Any) -> int: ...

    def allowance(self, inflight: int) -> int: ...


@dataclass
class Model:
    """The host model: partitions, GPU workers and their service time (s), synthesis slots
    and the median synthesis (s) with its lognormal sigma, the budget (partitions)."""

    partitions: int = 200
    gpu_workers: int = 2
    gpu_s: float = 0.2
    slots: int = 8
    synthesis_s: float = 0.5
    sigma: float = 0.2
    budget: int = 32
    seed: int = 1

    def hello(self, engine: str, key: str) -> dict[str, Any]:
        """The hello's fields (the client adds type, protocol and resume)."""
        return {
            "engine": engine, "workload_key": key, "fallback": {"mode": "hold"},
            "shape": {"gpu_workers": self.gpu_workers, "partition_bytes": GIB,
                      "memory_budget_bytes": self.budget * GIB, "synthesis_slots": self.slots},
        }  # fmt: skip


@dataclass
class Summary:
    busy: float  # GPU seconds ÷ (workers × the time from the first dispatch to the last proof)
    mean_inflight: float  # partitions, averaged over that time
    peak_inflight: int
    elapsed_s: float

    def line(self) -> str:
        return (f"busy {self.busy:.4f}, mean in flight {self.mean_inflight:.2f}, peak "
                f"{self.peak_inflight}, {self.elapsed_s:.1f} s")  # fmt: skip


class Engine:
    """The model run in real time, advised by ``advisor``."""

    def __init__(self, model: Model, advisor: Advisor) -> None:
        self.model = model
        self.advisor = advisor
        self._random = random.Random(model.seed)
        self._slots = asyncio.Semaphore(model.slots)
        self._ready: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
        self._next = 0
        self._inflight = 0
        self._done = 0
        self._peak = 0
        self._area = 0.0  # partition-seconds in flight
        self._last = self._began = time.monotonic()
        self._gpu_s = 0.0
        self._finished = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def _account(self, change: int) -> None:
        now = time.monotonic()
        self._area += self._inflight * (now - self._last)
        self._last = now
        self._inflight += change
        self._peak = max(self._peak, self._inflight)

    async def run(self) -> Summary:
        workers = [asyncio.ensure_future(self._gpu(w)) for w in range(self.model.gpu_workers)]
        pacing = asyncio.ensure_future(self._follow())
        await self.advisor.event("backlog", partitions=self.model.partitions)
        await self._finished.wait()
        elapsed = time.monotonic() - self._began
        for task in (*workers, pacing, *self._tasks):
            task.cancel()
        self._account(0)
        busy = self._gpu_s / (self.model.gpu_workers * elapsed)
        return Summary(busy, self._area / elapsed, self._peak, elapsed)

    async def _follow(self) -> None:
        """Dispatch what each decision says; by the fallback while pacer is away."""
        while True:
            if self.advisor.connected:
                try:
                    decision = await asyncio.wait_for(self.advisor.decisions.get(), 0.2)
                except TimeoutError:
                    continue
                await self._dispatch(decision["dispatch"], advised=True)
            else:
                await self._dispatch(self.advisor.allowance(self._inflight), advised=False)
                await asyncio.sleep(FALLBACK_TICK_S)

    async def _dispatch(self, count: int, *, advised: bool) -> None:
        room = min(self.model.partitions - self._next, self.model.budget - self._inflight)
        started = max(0, min(count, room))
        for _ in range(started):
            name = f"p{self._next:06d}"
            self._next += 1
            self._account(+1)
            await self.advisor.event("dispatched", partition=name)
            task = asyncio.ensure_future(self._synthesize(name, time.monotonic()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if advised and count > started:
            await self.advisor.event("declined", count=count - started)

    async def _synthesize(self, name: str, dispatched: float) -> None:
        async with self._slots:
            await self.advisor.event("synthesis_started", partition=name)
            began = time.monotonic()
            median = self.model.synthesis_s
            await asyncio.sleep(self._random.lognormvariate(0, self.model.sigma) * median)
        ended = time.monotonic()
        took = ended - dispatched
        await self.advisor.event("synthesis_ready", partition=name, synthesis_s=took,
                                 compute_s=ended - began)  # fmt: skip
        self._ready.put_nowait((name, took))

    async def _gpu(self, worker: int) -> None:
        while True:
            name, _ = await self._ready.get()
            await self.advisor.event("gpu_started", partition=name, worker=worker)
            began = time.monotonic()
            await asyncio.sleep(self.model.gpu_s)
            took = time.monotonic() - began
            self._gpu_s += took
            self._account(-1)
            await self.advisor.event("gpu_finished", partition=name, worker=worker, gpu_s=took)
            self._done += 1
            if self._done == self.model.partitions:
                self._finished.set()


async def keep_connected(client: EngineClient) -> None:
    """Reconnect (resuming) whenever pacer closes, cannot be reached or is not ready yet
    (it answers 503 while it starts)."""
    while True:
        if not client.connected:
            try:
                await client.connect()
            except (*AWAY, EngineRefusedError):
                pass  # away, starting or refusing: the next try may find it
            except Exception as exc:  # not the client's documented errors: say so, go on
                print(f"engine: reconnecting raised {exc!r}", file=sys.stderr)
        await asyncio.sleep(RECONNECT_S)


async def main_async(args: argparse.Namespace) -> Summary:
    model = Model(args.partitions, args.gpu_workers, args.gpu_s, args.slots, args.synthesis_s,
                  args.sigma, args.budget, args.seed)  # fmt: skip
    client = EngineClient(args.url, model.hello(args.engine, args.workload_key),
                          token=args.token, unix_socket=args.unix_socket)  # fmt: skip
    try:
        await client.connect()
    except AWAY as exc:
        # pacer away, still starting, or gone before its welcome: the engine starts by its
        # fallback, and the keeper below connects once pacer answers. A refusal is final.
        print(f"engine: pacer not reached ({exc!r}); by the fallback until it is",
              file=sys.stderr)  # fmt: skip
    keeper = asyncio.ensure_future(keep_connected(client))
    try:
        return await Engine(model, client).run()
    finally:
        keeper.cancel()
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", default="ws://127.0.0.1:9470/v1/engine", help="pacer's engine WebSocket"
    )
    parser.add_argument(
        "--unix-socket", help="connect through this Unix socket (PACER_ENGINE__SOCKET)"
    )
    parser.add_argument("--token", help="PACER_API__TOKEN, where pacer has one")
    parser.add_argument("--engine", default="example-engine", help="this engine's name")
    parser.add_argument("--workload-key", default="example/partition", help="its workload key")
    parser.add_argument("--partitions", type=int, default=200, help="partitions to prove")
    parser.add_argument("--gpu-workers", type=int, default=2, help="GPU workers")
    parser.add_argument("--gpu-s", type=float, default=0.2, help="GPU seconds a partition")
    parser.add_argument("--slots", type=int, default=8, help="synthesis slots")
    parser.add_argument("--synthesis-s", type=float, default=0.5, help="median synthesis seconds")
    parser.add_argument("--sigma", type=float, default=0.2, help="lognormal sigma of synthesis")
    parser.add_argument("--budget", type=int, default=32, help="memory budget (partitions)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the synthesis draws")
    summary = asyncio.run(main_async(parser.parse_args(argv)))
    print(f"engine: {summary.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
