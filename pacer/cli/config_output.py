"""``pacer config``: the settings as an environment file, and what they resolve to here."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

from pacer import config
from pacer.config.env import HOST_DEPENDENT, SECRET_MASK

__all__ = ["environment_file", "print_config"]


HEADER = """\
# pacer settings. Only what was set (in the environment) is assigned below; every other
# setting is commented out with its default, or with the value derived from this host, so
# that this file, used as an EnvironmentFile, overrides nothing else (a unit's Environment=)."""


def environment_file(settings: config.Settings, resolved: Sequence[tuple[str, str]] = ()) -> str:
    """``settings`` as an environment file that reads back to equal settings (a systemd
    EnvironmentFile, or a shell's ``set -a; . FILE``): each variable after its meaning. Only a
    variable that was set is assigned (quoted where it must be); the rest are comments showing
    the default, or the value derived from this host; a secret is never shown.

    ``resolved``: what the settings come to on this host, as (name, value) rows (the service's
    plan: ``pacer.plan.describe``), printed after the variables as comments, never read back.
    """
    lines = [HEADER]
    for var, value in config.effective(settings):
        lines.append(f"# {var.description}")
        if value == SECRET_MASK:
            lines.append(f"#{var.name}=<set, not shown>")
        elif not config.is_set(settings, var.name) or value == "":
            derived = "  (derived from this host)" if var.default == HOST_DEPENDENT else ""
            lines.append(f"#{var.name}={shlex.quote(value) if value else ''}{derived}")
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
