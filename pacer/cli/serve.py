"""``pacer serve``: the service, begun as early as it can be.

The workload's early start (the ntt workload's: the CUDA driver) begins before the rest of
pacer is imported, and the signals the service answers are held from before its first step
(`pacer.runtime.signals.Held`). The start's first steps (the journal's lock, the workload, the
plan) come next, and the pool's pinning begins before the HTTP server and the rest of the
service are imported (`pacer.service.first_steps`). This module imports nothing heavy at its
top, so that all of this happens in this order.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pacer.runtime import early_start

if TYPE_CHECKING:
    from pacer import config

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "main"]

HELP = "run the service: HTTP API, journal, paced pipeline (Ctrl-C or SIGTERM drains)"
DESCRIPTION = (
    "Run pacer on uvloop: accept jobs over HTTP, journal them, pace their partitions through "
    "synthesis and proving, export metrics; pace engines it does not own through sessions at "
    "/v1/engine (docs/engine-protocol.md). The first SIGTERM/SIGINT drains in-flight work "
    "(PACER_SHUTDOWN__DRAIN_S) and exits 0; a second cuts the drain short and exits 1, as does "
    "a stop that leaves a journal call that hangs (PACER_SHUTDOWN__JOURNAL_S). Exit status 2: "
    "refused to start for what a restart cannot mend (bad settings, a journal another pacer "
    "holds); a journal out of reach at start is waited for, not ready. Exit status 1 where the "
    "address cannot be listened on (a port in use), in one line."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pacer serve``."""
    from pacer.cli import args as cli_args

    parser.add_argument("--host", help="address to listen on (PACER_API__HOST: 127.0.0.1)")
    parser.add_argument(
        "--port", type=cli_args.count(0), help="TCP port, 0 for a free one (PACER_API__PORT: 9470)"
    )
    cli_args.add_log_arguments(parser)


def main(argv: Sequence[str]) -> int:
    """``pacer serve`` with ``argv`` its arguments; the exit status (2: refused to start, for
    what a restart cannot mend)."""
    early_start.begin(["serve", *argv])  # beside the imports below, not after them
    parser = argparse.ArgumentParser(prog="pacer serve", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    from pacer.cli.args import load_settings

    settings = load_settings()
    if settings is None:
        return 2
    return _serve(args, settings)


def _serve(args: argparse.Namespace, settings: config.Settings) -> int:
    """Apply the options, set up the logs and serve; 2 with the reason where the start is
    refused for what a restart cannot mend (bad options, settings the host cannot meet, a
    journal this pacer cannot use as it is: another's, a newer schema's, not a database), 1
    for the rest. A journal out of reach (a database down, a disk full, read-only or
    failing) ends nothing: the service waits for it, not ready."""
    import sqlite3

    from pydantic import ValidationError

    from pacer.config.operation import ListenError
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
    problem = settings.api.bind_problem("--host" if args.host is not None else "PACER_API__HOST")
    if problem is not None:
        print(f"pacer: {problem}", file=sys.stderr)
        return 2
    logs.setup(args.log_level, args.log_format)
    refused = (ConfigurationError, WorkloadError, JournalRefusedError)
    try:
        return _serve_from_first_steps(settings)
    except refused as exc:
        print(f"pacer: {exc}", file=sys.stderr)
        return 2
    except sqlite3.OperationalError as exc:  # a fault of the moment: a restart may mend it
        print(f"pacer: journal {settings.journal.location}: {exc}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:  # not a database, or a damaged one
        print(f"pacer: journal {settings.journal.location}: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:
        print(f"pacer: {exc}", file=sys.stderr)
        return 1
    except JournalUnavailable as exc:
        print(f"pacer: cannot serve: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # not one the start knows: where it came from goes to the log too
        logging.getLogger("pacer.service").error("cannot serve: %s", exc, exc_info=exc)
        print(f"pacer: cannot serve: {exc}", file=sys.stderr)
        return 1


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
