"""What `pacer serve` begins before its own imports: the early start its workload names.

A workload's module may have work to do before its first use that needs nothing of pacer:
the ntt workload's is the CUDA driver's start (cuInit, `gpu.cuda.devices.begin_driver_start`).
`pacer serve` begins it on the workload's own thread as its imports begin (pydantic's and
the settings' among them), and the first steps find it done. Named here as a workload is, by
``module:function``, so that pacer's core imports nothing of the device code. The workload is
read from the environment as the settings will read it (``PACER_WORKLOAD``, its case
ignored); one with no early start begins nothing, and an early start that fails is left for
the first steps, which do the same work and say what failed.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence

DEFAULT_WORKLOAD = "gpu.workload:ntt"
WORKLOAD_ALIASES = {"ntt": DEFAULT_WORKLOAD}
"""Short names of workloads that live outside pacer, as ``PACER_WORKLOAD`` accepts them."""
EARLY_STARTS = {DEFAULT_WORKLOAD: "gpu.cuda.devices:begin_driver_start"}
"""For a workload (``module:factory``), the function that begins its early start."""


def workload_named(environ: Mapping[str, str]) -> str:
    """The workload ``PACER_WORKLOAD`` names in ``environ`` (the default where unset), its
    short name resolved."""
    name = next((value for key, value in environ.items() if key.upper() == "PACER_WORKLOAD"),
                DEFAULT_WORKLOAD)  # fmt: skip
    return WORKLOAD_ALIASES.get(name, name)


def begin(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> bool:
    """For ``pacer serve`` (``argv`` its arguments), begin the early start of the workload
    ``environ`` names; whether one began."""
    if list(argv[:1]) != ["serve"]:
        return False
    early = EARLY_STARTS.get(workload_named(environ))
    if early is None:
        return False
    module, _, function = early.partition(":")
    try:
        getattr(importlib.import_module(module), function)()
    except Exception:  # the first steps do this work again, and say what failed
        return False
    return True
