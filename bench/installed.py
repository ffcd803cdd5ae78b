"""The environment a bench's own `pacer` processes run in: as an installed pacer's would.

An installed pacer has its modules' bytecode (``pip install`` compiles it, the image's too). A
machine whose Python is told not to write bytecode (``PYTHONDONTWRITEBYTECODE``, as the GPU
machines' images do) would have each start compile pacer, pydantic and NumPy from source
again, some 0.4 s that no installed host spends: a start's time would be mostly that. So the
processes a bench starts write and read their bytecode under one cache directory
(``PYTHONPYCACHEPREFIX``) kept for the machine's benches; the first process to import a module
compiles it, as the first run after an install would.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

BYTECODE_DIR = Path(tempfile.gettempdir(), "pacer-bench-bytecode")


def bytecode_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (this process's by default) with bytecode written and read under
    `BYTECODE_DIR`."""
    env = dict(os.environ if environ is None else environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(BYTECODE_DIR)
    return env
