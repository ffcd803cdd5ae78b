"""The ``pacer`` command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from pacer.runtime import early_start

early_start.begin(sys.argv[1:])  # for `pacer serve`: beside the imports below, not after

from pacer import __version__, config  # noqa: E402
from pacer.cli import args as cli_args  # noqa: E402
from pacer.cli import jobs as cli_client  # noqa: E402
from pacer.cli import run as cli_run  # noqa: E402
from pacer.config.env import SECRET_MASK  # noqa: E402
from pacer.sim import cli as sim_cli  # noqa: E402

DESCRIPTION = """\
pacer paces partition dispatch between CPU synthesis and GPU workers of a proving pipeline.

Start with `pacer run`: it serves on this host, submits jobs, follows them and prints a summary.
Settings come from PACER_* environment variables (`pacer config` lists them all).
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pacer", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"pacer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cli_run.add_arguments(sub.add_parser("run", help=cli_run.HELP))

    srv = sub.add_parser(
        "serve",
        help="run the service: HTTP API, journal, paced pipeline (Ctrl-C or SIGTERM drains)",
        description="Run pacer on uvloop: accept jobs over HTTP, journal them, pace their "
        "partitions through synthesis and proving, export metrics. The first SIGTERM/SIGINT "
        "drains in-flight work (PACER_SHUTDOWN__DRAIN_S) and exits 0; a second cuts the drain "
        "short and exits 1, as does a stop that leaves a journal call that hangs "
        "(PACER_SHUTDOWN__JOURNAL_S).",
    )
    srv.add_argument("--host", help="address to listen on (PACER_API__HOST: 127.0.0.1)")
    srv.add_argument(
        "--port", type=cli_args.count(0), help="TCP port, 0 for a free one (PACER_API__PORT: 9470)"
    )
    cli_args.add_log_arguments(srv)

    cli_client.add_submit_arguments(
        sub.add_parser(
            "submit",
            help="submit jobs to a running service through its HTTP API",
            description="Submit jobs through the HTTP API; with --wait, follow them to the end.",
        )
    )
    cli_client.add_status_arguments(
        sub.add_parser("status", help="print a running service's state, or a job's")
    )

    sim_cli.add_arguments(sub.add_parser("simulate", help=sim_cli.HELP))

    from pacer import settle

    stl = sub.add_parser(
        "settle", help=settle.HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    settle.add_arguments(stl)

    cfg = sub.add_parser(
        "config",
        help="print the effective settings as PACER_* variables",
        description="Print every setting with its effective value, as an environment file "
        "(usable as a systemd EnvironmentFile, or sourced by a shell), each preceded by its "
        "meaning and unit. Unset settings are commented out; a secret is never printed.",
    )
    cfg.add_argument(
        "--markdown", action="store_true", help="print the README table of variables instead"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "settle":
        from pacer import settle

        return settle.main(args)
    if args.command == "config" and args.markdown:
        print(config.markdown_table())
        return 0
    try:
        settings = config.load_settings()
    except config.SettingsError as exc:
        print("pacer: invalid settings:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    if args.command == "config":
        return _config(settings)
    if args.command == "serve":
        return _serve(args, settings)
    if args.command == "run":
        return cli_run.main(args, settings)
    if args.command in ("submit", "status"):
        return cli_client.run(args, settings)
    return sim_cli.main(args, settings)


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


def _config(settings: config.Settings) -> int:
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


def _serve(args: argparse.Namespace, settings: config.Settings) -> int:
    import sqlite3

    from pydantic import ValidationError

    from pacer.journal import JournalRefusedError
    from pacer.journal.health import JournalUnavailable
    from pacer.plan import ConfigurationError
    from pacer.runtime import logs
    from pacer.workload import WorkloadError

    try:
        if args.host is not None:
            settings.api.host = args.host
        if args.port is not None:
            settings.api.port = args.port
    except ValidationError as exc:
        error = exc.errors()[0]
        print(f"pacer: --{error['loc'][0]}: {error['msg']}", file=sys.stderr)
        return 2
    logs.setup(args.log_level, args.log_format)
    refused = (ConfigurationError, WorkloadError, JournalRefusedError, JournalUnavailable)
    try:
        return _serve_from_first_steps(settings)
    except refused as exc:
        print(f"pacer: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"pacer: journal {settings.journal.location}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pacer: cannot serve: {exc}", file=sys.stderr)
        return 2


def _serve_from_first_steps(settings: config.Settings) -> int:
    """Take the start's first steps (the journal's lock, the workload, the plan) and begin
    the pool's pinning before importing the rest of the service, which then opens beside it
    (`pacer.service.first_steps`); with a fleet's journal the pinning waits for it. The
    signals the service answers are held from before the first step
    (`pacer.runtime.signals.Held`)."""
    from pacer.runtime.signals import Held
    from pacer.service.first_steps import FirstSteps

    held = Held().install()
    first_steps = FirstSteps(settings)
    first_steps.take()
    if not settings.journal.fleet:
        first_steps.begin_prepare()
    from pacer import server

    return server.run(settings, first_steps, held)


if __name__ == "__main__":
    sys.exit(main())
