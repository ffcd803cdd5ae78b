"""The forkserver's preload: load the field's compiled synthesis kernel once, before any fork.

Each worker forked afterwards starts with the kernel, instead of loading its own beside the
pool's pinning (docs/decisions/startup.md). `gpu.procs.executor.ProcessSynthesizer` names the
module with `module_for`. If loading fails here, each worker loads its kernel itself when it
starts (`cpu_backend.warm`) and reports the failure.
"""

from __future__ import annotations

import contextlib

from gpu.field.prime import PrimeField
from gpu.reference import cpu_backend

__all__ = ["load", "module_for"]


def module_for(field: PrimeField | None) -> str:
    """The module that loads ``field``'s kernel when imported; every field's for None."""
    return f"{__name__}.{'every' if field is None else field.name}"


def load(*fields: PrimeField) -> None:
    """Load the synthesis kernel of each of ``fields`` where Numba is installed.

    Never raises: an exception here would kill the forkserver, and every worker with it.
    """
    if cpu_backend.numba_available():
        with contextlib.suppress(Exception):
            for field in fields:
                cpu_backend.warm(field)
