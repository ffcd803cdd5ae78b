"""What `pacer serve` begins before its own imports: the early start its workload names.

For the ntt workload this starts the CUDA driver (`gpu.cuda.devices.begin_driver_start`) on its
own thread, beside the imports (docs/decisions/startup.md, D123). It is named by
``module:function``, so pacer's core imports no device code. The workload comes from
``PACER_WORKLOAD``. If the early start fails, the first steps redo the work and report.
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
