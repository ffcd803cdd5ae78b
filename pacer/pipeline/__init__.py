"""The asyncio pipeline: backlog → paced dispatch → synthesis → ready queue → proving workers.

The dispatch loop asks the controller how many partitions to start and when to ask again. It
wakes early on every pipeline event. Synthesis runs on a thread pool sized to the synthesis cap,
so buffers reach the proving worker without a copy (docs/decisions/pipeline.md, D34). Each
proving worker has its own thread (`proving`). A partition holds its bytes against the memory
budget from dispatch until its proving ends (`holdings`). Busy time is kept per GPU (`busy`).

Every workload call has a time limit (`pacer.pipeline.attempts.CallLimits`). A watchdog abandons
a call past it: the attempt fails, a new thread takes the hung one's place, and the bytes stay
counted until the call returns (docs/decisions/hangs.md, D54). Anything a call raises fails the
attempt, not the thread. The service decides whether to retry.

Modules: `core` (the `Pipeline`), `inflight` (partitions from dispatch to outcome, and the
watchdog), `calls` (synthesis and verification threads), `proving`, `holdings`, `busy`, `work`
(what travels through it) and `timers` (how it waits).
"""

from pacer.pipeline.busy import BusyMeter, GpuBusy
from pacer.pipeline.core import Pipeline
from pacer.pipeline.timers import LoopTimers, Timers
from pacer.pipeline.work import Observer, Outcome, Work

__all__ = [
    "BusyMeter",
    "GpuBusy",
    "LoopTimers",
    "Observer",
    "Outcome",
    "Pipeline",
    "Timers",
    "Work",
]
