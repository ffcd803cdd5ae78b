"""The ``pacer`` command line: which command runs, its arguments, its exit status."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pacer import __version__

DESCRIPTION = """\
pacer paces partition dispatch between CPU synthesis and GPU workers of a proving pipeline.

Start with `pacer run`: it serves on this host, submits jobs, follows them and prints a summary.
Settings come from PACER_* environment variables (`pacer config` lists them all).
"""


SERVING = {"api", "journal", "shutdown", "timeouts", "retry", "health"}
"""The settings only a service reads: a command that serves nothing does not refuse them."""
CLIENT = {"api"}
"""What a client of the HTTP API reads: where the service is, and its token."""


def reads(command: str) -> set[str] | None:
    """The settings ``command`` reads (`pacer.config.load_settings`); None: every one."""
    from pacer.config import Settings

    if command in ("simulate", "tune"):
        return set(Settings.model_fields) - SERVING
    if command in ("submit", "status", "jobs", "cancel"):
        return CLIENT
    return None


def _parser() -> argparse.ArgumentParser:
    from pacer.cli import jobs as cli_client
    from pacer.cli import run as cli_run
    from pacer.cli import serve
    from pacer.cli import tune as cli_tune
    from pacer.sim import cli as sim_cli

    parser = argparse.ArgumentParser(
        prog="pacer", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"pacer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cli_run.add_arguments(sub.add_parser("run", help=cli_run.HELP))

    serve.add_arguments(sub.add_parser("serve", help=serve.HELP, description=serve.DESCRIPTION))

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
    cli_client.add_jobs_arguments(
        sub.add_parser(
            "jobs",
            help="list a running service's jobs, newest first",
            description="List the newest jobs of a running service as a table: id, state, "
            "partitions done, priority, when it was submitted, and its result digest or error.",
        )
    )
    cli_client.add_cancel_arguments(
        sub.add_parser(
            "cancel",
            help="cancel queued or running jobs",
            description="Cancel jobs: their partitions not yet started are never started; "
            "those in flight finish and their results are dropped. The job ends cancelled, in "
            "the journal (a restart keeps it so). "
            "Cancelling a cancelled job again is no error; a completed or failed one is "
            "refused (exit status 1).",
        )
    )

    sim_cli.add_arguments(sub.add_parser("simulate", help=sim_cli.HELP))
    cli_tune.add_arguments(sub.add_parser("tune", help=cli_tune.HELP))

    from pacer import settle

    stl = sub.add_parser(
        "settle", help=settle.HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    settle.add_arguments(stl)

    cfg = sub.add_parser(
        "config",
        help="print the effective settings as PACER_* variables",
        description="Print every setting as an environment file (a systemd EnvironmentFile, "
        "or sourced by a shell), each preceded by its meaning and unit. Only the settings set "
        "in the environment are assigned; the others are comments with their default (or the "
        "value derived from this host), so the file overrides nothing a unit's Environment= "
        "lines set. A secret is never printed.",
    )
    cfg.add_argument(
        "--markdown",
        action="store_true",
        help="print the table of docs/settings.md instead",
    )
    from pacer.cli import completion

    completion.add_arguments(sub.add_parser("completion", help=completion.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``pacer`` command; its exit status. ``pacer serve`` goes to `pacer.cli.serve`
    before anything else is imported: it begins its workload's early start first."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["serve"]:
        from pacer.cli import serve

        return serve.main(arguments[1:])
    parser = _parser()
    args = parser.parse_args(arguments)
    if args.command == "completion":
        from pacer.cli import completion

        print(completion.script(parser, args.shell), end="")
        return 0
    if args.command == "settle":
        from pacer import settle

        return settle.main(args)
    from pacer import config

    if args.command == "config" and args.markdown:
        print(config.markdown_table())
        return 0
    from pacer.cli.args import load_settings

    settings = load_settings(reads(args.command))
    if settings is None:
        return 2
    if args.command == "config":
        from pacer.cli.config_output import print_config

        return print_config(settings)
    if args.command == "run":
        from pacer.cli import run as cli_run

        return cli_run.main(args, settings)
    if args.command in ("submit", "status", "jobs", "cancel"):
        from pacer.cli import jobs as cli_client

        return cli_client.run(args, settings)
    if args.command == "tune":
        from pacer.cli import tune as cli_tune

        return cli_tune.main(args, settings)
    from pacer.sim import cli as sim_cli

    return sim_cli.main(args, settings)


if __name__ == "__main__":
    sys.exit(main())
