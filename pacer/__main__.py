"""The ``pacer`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pacer import config
from pacer.sim.policies import POLICIES

DESCRIPTION = """\
pacer paces partition dispatch between CPU synthesis and GPU workers of a proving pipeline.

Settings come from PACER_* environment variables (`pacer config` lists them all).
"""

SIMULATE_EPILOG = """\
policies:
  pi             pacer's controller (PI on the projected ready depth, synthesis cap, bootstrap)
  cuzk           the cuzk proving engine's dispatch loop (DispatchPacer at setpoint 8),
                 ported from its source
  cuzk-default   the same loop as cuzk ships it, its pacer off
  unpaced        dispatch whenever the memory budget allows
  fixed          keep --concurrency partitions in flight (default: Little's-law minimum + target)

examples:
  pacer simulate pacer/sim/scenarios/steady-backlog.toml
  pacer simulate my-host.toml --policy cuzk --plot cuzk.png
  PACER_CONTROLLER__KP=0.3 pacer simulate my-host.toml --json
  pacer simulate --suite
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pacer", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = sub.add_parser(
        "simulate",
        help="run the pacing controller against a simulated host, on a virtual clock",
        description="Simulate a scenario (a TOML file, see README) under a dispatch policy "
        "and print what happened. An hour of simulated time takes about a second.",
        epilog=SIMULATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("scenario", nargs="?", type=Path, help="scenario TOML file")
    sim.add_argument(
        "--policy", choices=POLICIES, default="pi", help="dispatch policy (default: pi)"
    )
    sim.add_argument(
        "--concurrency", type=int, metavar="N", help="partitions in flight for --policy fixed"
    )
    sim.add_argument("--json", action="store_true", help="print one JSON object instead")
    sim.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="also draw the run over time (matplotlib)"
    )
    sim.add_argument(
        "--suite",
        action="store_true",
        help="run every shipped scenario (or the given one) under every policy, check the "
        "targets, and print the table",
    )
    sim.add_argument("--markdown", action="store_true", help="with --suite: print Markdown tables")

    srv = sub.add_parser(
        "serve",
        help="run the service: HTTP API, journal, paced pipeline (Ctrl-C or SIGTERM drains)",
        description="Run pacer on uvloop: accept jobs over HTTP, journal them, pace their "
        "partitions through synthesis and proving, export metrics. The first SIGTERM/SIGINT "
        "drains in-flight work (PACER_SHUTDOWN__DRAIN_S) and exits 0; a second exits at once.",
    )
    srv.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])

    sbm = sub.add_parser(
        "submit",
        help="submit jobs to a running service through its HTTP API",
        description="Submit jobs through the HTTP API; with --wait, follow them to the end.",
    )
    sbm.add_argument("--jobs", type=int, default=1, metavar="N", help="jobs to submit (1)")
    sbm.add_argument(
        "--partitions", type=int, default=8, metavar="K", help="partitions per job (8)"
    )
    sbm.add_argument("--priority", type=int, default=0, help="higher runs first (0)")
    sbm.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="workload parameter, e.g. --param log_n=18 (repeatable)",
    )
    sbm.add_argument("--wait", action="store_true", help="wait until the jobs end, with progress")
    _client_args(sbm)

    sts = sub.add_parser("status", help="print a running service's state, or a job's")
    sts.add_argument("job", nargs="?", help="a job's id: that job's state instead")
    sts.add_argument("--json", action="store_true", help="print the raw JSON")
    sts.add_argument(
        "--limit", type=int, default=0, metavar="N", help="with JOB: list N of its partitions"
    )
    sts.add_argument(
        "--offset", type=int, default=0, metavar="I", help="with JOB: from partition I (0)"
    )
    _client_args(sts)

    from pacer import settle

    stl = sub.add_parser(
        "settle", help=settle.HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    settle.add_arguments(stl)

    cfg = sub.add_parser(
        "config",
        help="print the effective settings as PACER_* variables",
        description="Print every setting with its effective value, as an environment file "
        "(usable as a systemd EnvironmentFile), each preceded by its meaning and unit.",
    )
    cfg.add_argument(
        "--markdown", action="store_true", help="print the README table of variables instead"
    )
    return parser


def _client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help="service address (default: from PACER_API__HOST and PACER_API__PORT)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the service (30)"
    )


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
        for var, value in config.effective(settings):
            print(f"# {var.description}\n{var.name}={value}")
        return 0
    if args.command == "serve":
        return _serve(args, settings)
    if args.command in ("submit", "status"):
        from pacer import cli_client

        return cli_client.run(args, settings)
    return _simulate(args, settings)


def _serve(args: argparse.Namespace, settings: config.Settings) -> int:
    import sqlite3

    from pacer import logs, service
    from pacer.journal import JournalInUseError, NewerSchemaError
    from pacer.journal_health import JournalUnavailable
    from pacer.plan import ConfigurationError
    from pacer.workload import WorkloadError

    logs.setup(args.log_level)
    refused = (ConfigurationError, WorkloadError, NewerSchemaError, JournalInUseError,
               JournalUnavailable)  # fmt: skip
    try:
        return service.run(settings)
    except refused as exc:
        print(f"pacer: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"pacer: journal {settings.journal.path}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pacer: cannot serve: {exc}", file=sys.stderr)
        return 2


def _simulate(args: argparse.Namespace, settings: config.Settings) -> int:
    from pacer.sim import table
    from pacer.sim.plot import PlotUnavailableError, plot_run
    from pacer.sim.scenario import ScenarioError, load_scenario
    from pacer.sim.suite import check_targets, run_policy, run_suite

    if args.concurrency is not None and (args.policy != "fixed" or args.concurrency < 1):
        print("pacer: --concurrency takes a number >= 1 and needs --policy fixed", file=sys.stderr)
        return 2
    try:
        if args.suite:
            paths = None if args.scenario is None else [args.scenario]
            reports = run_suite(settings, paths, progress=_progress)
            findings = check_targets(reports, settings)
            if args.json:
                print(json.dumps([r.as_dict() for r in reports], indent=2))
            else:
                print(table.suite(reports, markdown=args.markdown))
                print()
                print(table.findings(findings, markdown=args.markdown))
            return 0 if all(f.passed for f in findings) else 1
        if args.scenario is None:
            print("pacer: simulate needs a SCENARIO file (or --suite)", file=sys.stderr)
            return 2
        scenario = load_scenario(args.scenario)
        raw, report = run_policy(scenario, args.policy, settings, args.concurrency)
    except ScenarioError as exc:
        print(f"pacer: invalid scenario:\n{exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else table.single(report))
    if args.plot is not None:
        try:
            plot_run(raw, args.plot, settings.controller.target_ready)
        except PlotUnavailableError as exc:
            print(f"pacer: {exc}", file=sys.stderr)
            return 2
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _progress(done: int, total: int, report: object) -> None:
    from pacer.sim.report import Report

    assert isinstance(report, Report)
    print(f"[{done}/{total}] {report.scenario} / {report.policy}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
