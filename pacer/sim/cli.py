"""`pacer simulate`: run a scenario, the suite, or list the shipped scenarios."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pacer.cli.args import count
from pacer.config import Settings
from pacer.control.registry import POLICIES

HELP = "run the pacing controller against a simulated host, on a virtual clock"
DESCRIPTION = """\
Simulate a scenario (a shipped one by name, or a TOML file: docs/simulating.md) under a
dispatch policy and print what happened. An hour of simulated time takes about a second.
"""
EPILOG = """\
policies:
  pi             pacer's controller (PI on the projected ready depth, synthesis cap, bootstrap)
  cuzk           the cuzk proving engine's dispatch loop (DispatchPacer at setpoint 8),
                 ported from its source
  cuzk-default   the same loop as cuzk ships it, its pacer off
  unpaced        dispatch whenever the memory budget allows
  fixed          keep --concurrency partitions in flight (default: Little's-law minimum + target)

examples:
  pacer simulate --list
  pacer simulate h200
  pacer simulate gpu-stall --policy cuzk --plot cuzk.png
  pacer simulate my-host.toml --policy fixed --concurrency 40
  PACER_CONTROLLER__KP=0.3 pacer simulate my-host.toml --json
  pacer simulate --suite
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "scenario", nargs="?", help="a shipped scenario's name (see --list) or a TOML file"
    )
    parser.add_argument("--list", action="store_true", help="list the shipped scenarios")
    parser.add_argument("--policy", choices=POLICIES, help="dispatch policy (pi)")
    parser.add_argument(
        "--concurrency", type=count(1), metavar="N", help="partitions in flight for --policy fixed"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also draw the run over time (.png, .svg, .pdf, ...); needs matplotlib, the "
        "plot extra: pip install -e '.[plot]'",
    )
    parser.add_argument(
        "--suite",
        action="store_true",
        help="run every shipped scenario (or the given one) under every policy, check the "
        "targets, and print the table",
    )
    parser.add_argument("--markdown", action="store_true", help="with --suite: Markdown tables")


def refusal(args: argparse.Namespace) -> str | None:
    """Why these arguments cannot go together, if they cannot: a flag the mode would ignore,
    or two that contradict each other."""
    given = {
        "--policy": args.policy is not None,
        "--concurrency": args.concurrency is not None,
        "--json": args.json,
        "--plot": args.plot is not None,
        "--suite": args.suite,
        "--markdown": args.markdown,
    }
    if args.list:
        extra = [flag for flag, on in given.items() if on]
        if args.scenario is not None or extra:
            return f"--list takes nothing else (got {' '.join(extra) or args.scenario})"
        return None
    if args.suite:
        unused = [f for f in ("--policy", "--concurrency", "--plot") if given[f]]
        if unused:
            return f"--suite runs every policy and draws nothing: drop {' '.join(unused)}"
        if args.json and args.markdown:
            return "--json and --markdown contradict each other: choose one"
        return None
    if args.scenario is None:
        return "simulate needs a SCENARIO (a name from --list, or a file), or --suite, or --list"
    if args.markdown:
        return "--markdown goes with --suite"
    if args.concurrency is not None and args.policy != "fixed":
        return "--concurrency takes a number >= 1 and needs --policy fixed"
    return None


def main(args: argparse.Namespace, settings: Settings) -> int:
    from pacer.sim.plot import PlotPathError, PlotUnavailableError, check_plot_path
    from pacer.sim.scenario import ScenarioError

    refused = refusal(args)
    if refused:
        print(f"pacer: {refused}", file=sys.stderr)
        return 2
    try:
        if args.list:
            return _list()
        if args.plot is not None:
            check_plot_path(args.plot)
        if args.suite:
            return _suite(args, settings)
        return _single(args, settings)
    except ScenarioError as exc:
        print(f"pacer: invalid scenario:\n{exc}", file=sys.stderr)
        return 2
    except (PlotPathError, PlotUnavailableError) as exc:
        print(f"pacer: {exc}", file=sys.stderr)
        return 2


def _list() -> int:
    from pacer.sim import table
    from pacer.sim.scenario import load_scenario, shipped_scenarios

    print(table.scenarios([load_scenario(path) for path in shipped_scenarios()]))
    return 0


def _suite(args: argparse.Namespace, settings: Settings) -> int:
    from pacer.sim import table
    from pacer.sim.scenario import scenario_path
    from pacer.sim.suite import check_targets, run_suite

    paths = None if args.scenario is None else [scenario_path(args.scenario)]
    reports = run_suite(settings, paths, progress=_progress)
    findings = check_targets(reports, settings)
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
    else:
        print(table.suite(reports, markdown=args.markdown))
        print()
        print(table.findings(findings, markdown=args.markdown))
    return 0 if all(f.passed for f in findings) else 1


def _single(args: argparse.Namespace, settings: Settings) -> int:
    from pacer.sim import table
    from pacer.sim.plot import plot_run
    from pacer.sim.scenario import load_scenario, scenario_path
    from pacer.sim.suite import run_policy

    scenario = load_scenario(scenario_path(args.scenario))
    raw, report = run_policy(scenario, args.policy or "pi", settings, args.concurrency)
    print(json.dumps(report.as_dict(), indent=2) if args.json else table.single(report))
    if args.plot is not None:
        try:
            plot_run(raw, args.plot, settings.controller.target_ready)
        except OSError as exc:
            print(f"pacer: --plot {args.plot}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _progress(done: int, total: int, reports: Sequence[object]) -> None:
    from pacer.sim.report import Report

    names = [r.policy for r in reports if isinstance(r, Report)]
    scenario = next(r.scenario for r in reports if isinstance(r, Report))
    print(f"[{done}/{total}] {scenario}: {' and '.join(names)}", file=sys.stderr, flush=True)
