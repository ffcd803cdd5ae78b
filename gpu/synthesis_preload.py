"""Imported once by the synthesis processes' forkserver, before it forks any worker: every
field's compiled synthesis kernel loaded (from Numba's cache), so each worker forked from it
starts with them instead of loading its own.

Sixteen workers each loading Numba and their kernel took ~5 s of a core apiece, beside the
pinning of the pool that start-up waits for; loaded once here, they cost that once
(bench/RESULTS.md). `gpu.process_executor.ProcessSynthesizer` names this module as the
forkserver's preload where synthesis is compiled. Should loading fail here, nothing is lost:
each worker loads its kernel itself when it starts (`cpu_backend.warm`), as it always does,
and that load reports the failure.
"""

from __future__ import annotations

import contextlib

from gpu import cpu_backend
from gpu.babybear import BABYBEAR
from gpu.goldilocks import GOLDILOCKS

PRELOADED_FIELDS = (GOLDILOCKS, BABYBEAR)

if cpu_backend.numba_available():
    # An exception here would kill the forkserver, and every worker with it.
    with contextlib.suppress(Exception):
        for _field in PRELOADED_FIELDS:
            cpu_backend.warm(_field)
