"""``pacer config``: the settings as an environment file, and what they resolve to here."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

from pacer import config
from pacer.config.env import SECRET_MASK

__all__ = ["environment_file", "print_config"]


def environment_file(settings: config.Settings, resolved: Sequence[tuple[str, str]] = ()) -> str:
    """``settings`` as an environment file that reads back to equal settings (a systemd
    EnvironmentFile, or a shell's ``set -a; . FILE``): each variable after its meaning, quoted
    where it must be; an unset one commented out (an empty value is refused), a secret too.

    ``resolved``: what the settings come to on this host, as (name, value) rows (the service's
    plan: ``pacer.plan.describe``), printed after the variables as comments, never read back.
    """
    lines = []
    for var, value in config.effective(settings):
        lines.append(f"# {var.description}")
        if value == "":
            lines.append(f"#{var.name}=")
        elif value == SECRET_MASK:
            lines.append(f"#{var.name}=<set, not shown>")
        else:
            lines.append(f"{var.name}={shlex.quote(value)}")
    if resolved:
        lines += ["", "# Resolved on this host from the settings above (not read back):"]
        lines += [f"#   {name} = {value or '(none)'}" for name, value in resolved]
    return "\n".join(lines)


def print_config(settings: config.Settings) -> int:
    """``pacer config``: the settings, then what they resolve to on this host; exit 2 when the
    service would refuse them here (the file is printed all the same)."""
    from pacer.plan import ConfigurationError, describe, host_plan
    from pacer.workload import WorkloadError

    try:
        resolved = describe(host_plan(settings))
    except (WorkloadError, ConfigurationError) as exc:
        print(environment_file(settings))
        print(f"pacer: the service would not start on this host: {exc}", file=sys.stderr)
        return 2
    print(environment_file(settings, resolved))
    return 0
