"""The asyncio pipeline: backlog → paced dispatch → synthesis → ready queue → proving workers.

The dispatch loop asks the controller (the same object the simulator drives) how many
partitions to start and when to ask again, and wakes early on every pipeline event. Synthesis
runs on a thread pool sized to the synthesis-concurrency cap: NumPy and native provers release
the GIL, and the buffers stay in this process, ready for the proving worker (and the pinned
pool) without a copy. Each proving worker has its own thread (`proving`). Every partition
holds its bytes against the memory budget from dispatch until its proving (GPU copy included)
has finished (`holdings`).

Busy time and idle gaps are kept per GPU, not per worker (`busy`): with two workers on one
device the GPU is busy while either proves, and an idle gap is a stretch when neither does.

Every workload call has a time limit (`pacer.pipeline.attempts.CallLimits`). A watchdog on the loop
abandons a call past it: the partition's attempt fails with the reason, a new thread takes the
hung one's place (synthesis and verification run on a `DaemonPool`; a proving worker gets a new
thread under the same index), and the partition's bytes stay counted against the budget until
the call really returns. Whatever a call raises, BaseException included, and a proof unfit to
journal fail the attempt, not the thread. The service decides whether the attempt is retried.

Modules: `core` (the `Pipeline`: the backlog and the dispatch loop), `inflight` (`InFlight`:
partitions from dispatch to their outcome, the watchdog of time limits), `calls` (synthesis and
verification on a `DaemonPool`), `proving` (the proving workers' threads), `holdings` (memory
held against the budget), `busy` (busy time per GPU), `work` (what travels through it),
`timers` (how it waits: on the event loop's clock, or a test's virtual one).
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
