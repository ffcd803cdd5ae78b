"""``pacer settle``: wait until memory has settled after a previous pacer died.

A proving daemon that dies leaves hundreds of GiB of pinned host memory that the kernel takes
minutes to give back. Run as systemd ``ExecStartPre=``, this command samples used memory (the
memory.current of the cgroup whose memory.max limits it, where one does; the host's MemTotal −
MemAvailable otherwise) until it is back at the baseline or has stopped changing, no
process of the old instance is left, alive or zombie, and no process that outlived it still
maps its pool's shared-memory blocks.

The decision logic (``detector.SettleDetector``, ``loop.settle``) is pure and runs on any timed
series: the real sampler on the monotonic clock (``loop.run``) or a recorded CSV on virtual time
(``loop.replay``). The package exports the command line (``cli``) that ``pacer settle`` runs.
"""

from __future__ import annotations

from pacer.settle.cli import HELP, add_arguments, main

__all__ = ["HELP", "add_arguments", "main"]
