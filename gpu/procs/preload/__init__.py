"""Imported once by the synthesis processes' forkserver, before it forks any worker: the
compiled synthesis kernel of the field in use loaded (from Numba's cache), so each worker forked
from it starts with it instead of loading its own.

Sixteen workers each loading Numba and their kernel took ~5 s of a core apiece, beside the
pinning of the pool that start-up waits for; loaded once here, they cost that once
(bench/RESULTS.md). `gpu.procs.executor.ProcessSynthesizer` names the module of its field
(`module_for`: ``gpu.procs.preload.goldilocks``, ``.babybear``, or ``.every`` where it was
given none) as the forkserver's preload where synthesis is compiled. Should loading fail here,
nothing is lost: each worker loads its kernel itself when it starts (`cpu_backend.warm`), as it
always does, and that load reports the failure.
"""

from __future__ import annotations

import contextlib

from gpu.field.prime import PrimeField
from gpu.reference import cpu_backend

__all__ = ["load", "module_for"]


def module_for(field: PrimeField | None) -> str:
    """The module that loads ``field``'s kernel when imported (every field's, for None)."""
    return f"{__name__}.{'every' if field is None else field.name}"


def load(*fields: PrimeField) -> None:
    """Load each of ``fields``' synthesis kernel, where Numba is installed; never raises (an
    exception here would kill the forkserver, and every worker with it)."""
    if cpu_backend.numba_available():
        with contextlib.suppress(Exception):
            for field in fields:
                cpu_backend.warm(field)
