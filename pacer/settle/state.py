"""The state file: the level memory settled at last, remembered as the next baseline, with the
scope it is of (the host's used memory, or a cgroup's memory.current)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pacer.settle.detector import DEFAULT_STATE_FILE
from pacer.settle.loop import Result, SettleOptions
from pacer.settle.scope import HOST, Scope


def default_state_file(environ: Mapping[str, str] = os.environ) -> Path:
    """``$STATE_DIRECTORY/settle.json`` under systemd's ``StateDirectory=`` (the first where
    it lists several), else /var/lib/pacer/settle.json."""
    state_dir = environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state_dir) / "settle.json" if state_dir else DEFAULT_STATE_FILE


@dataclass(frozen=True)
class Remembered:
    """The baselines a state file holds, and the scope the memory one is of (a file from
    before scopes: the host's). The GPU's is the GPU's whatever the scope.

    >>> Remembered(2**30, scope="cgroup", cgroup_path="/pacer").of(Scope("host"))
    False
    """

    baseline_bytes: int | None = None
    gpu_baseline_bytes: int | None = None
    scope: str = "host"
    cgroup_path: str | None = None

    def of(self, scope: Scope) -> bool:
        """Whether the memory baseline is of ``scope``'s memory (the same cgroup's, by path)."""
        return {"scope": self.scope, "cgroup_path": self.cgroup_path} == scope.key

    @property
    def what(self) -> str:
        if self.cgroup_path is None:
            return "the host's used memory"
        return f"cgroup {self.cgroup_path}'s memory.current"


def load_state(path: Path) -> Remembered:
    """What ``path`` remembers; nothing when nothing was recorded yet. Raises ValueError
    saying why a file that is there cannot be used."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return Remembered()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    found = [state.get("baseline_bytes"), state.get("gpu_baseline_bytes")]
    for key, value in zip(("baseline_bytes", "gpu_baseline_bytes"), found, strict=True):
        if value is not None and (type(value) is not int or value < 0):
            raise ValueError(f"{key} must be a whole number of bytes >= 0, got {value!r}")
    scope, cgroup = state.get("scope", "host"), state.get("cgroup_path")
    if (scope, type(cgroup)) not in {("host", type(None)), ("cgroup", str)}:
        raise ValueError(
            f'scope must be "host", or "cgroup" with a cgroup_path, got {scope!r} and {cgroup!r}'
        )
    return Remembered(found[0], found[1], scope, cgroup)


def with_baselines(
    options: SettleOptions, path: Path, scope: Scope, warn: Callable[[str], None]
) -> SettleOptions:
    """``options`` with the baselines ``path`` remembers: the memory one only where none was
    given and it is of ``scope`` (``warn`` hears when it is another's), the GPU's always. A
    file that cannot be used is ignored, and ``warn`` hears why."""
    try:
        remembered = load_state(path)
    except ValueError as exc:
        warn(f"ignoring state file {path}: {exc}")
        return options
    baseline = options.baseline_bytes
    if baseline is None and remembered.of(scope):
        baseline = remembered.baseline_bytes
    elif baseline is None and remembered.baseline_bytes is not None:
        warn(
            f"the baseline remembered in {path} is of {remembered.what}, not of {scope.what}: "
            "judged on stability alone until a settled run remembers one"
        )
    return dataclasses.replace(
        options, baseline_bytes=baseline, gpu_baseline_bytes=remembered.gpu_baseline_bytes
    )


def record_state(path: Path, result: Result, scope: Scope = HOST) -> None:
    """Remember the level of ``scope``'s memory that ``result`` settled at as the next
    baseline (atomically)."""
    last = result.samples[-1]
    # A pool kept for the next pacer is not memory at rest: the baseline leaves it out.
    state: dict[str, object] = {"baseline_bytes": last.judged_bytes, **scope.key}
    if last.gpu_used_bytes is not None:
        state["gpu_baseline_bytes"] = last.gpu_used_bytes
    state |= {"reason": result.reason, "recorded_at": datetime.now(UTC).isoformat()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)
