"""``pacer settle --scope``: the memory of the cgroup whose memory.max limits the process, or the
host's; on fake /proc/meminfo and cgroup v2 trees rewritten as a virtual clock moves, the CLI
end to end (a real kept pool in the test's directory, a real `python -m pacer settle`, a real
child in a limited cgroup where the tests run in one)."""

from __future__ import annotations

import argparse
import doctest
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from gpu.shm.record import sweep
from pacer.host.cgroup import read_cgroup_limit
from pacer.host.memory import HostFiles, HostMemory
from pacer.settle import cli as settle_cli
from pacer.settle import scope as scope_module
from pacer.settle import state as state_module
from pacer.settle.detector import GIB
from pacer.settle.loop import SettleOptions
from pacer.settle.scope import Scope, resolve_scope
from tests.conftest import FakeClock
from tests.kept_pools import Holder
from tests.servers import fake_host

ROOT = Path(__file__).resolve().parents[2]
KIB = 2**10
TIB = 2**40
UNIT = "/system.slice/pacer.service"
Tick = Callable[[float], None]

# What other pacers on this host left mapped does not decide these tests.
pytestmark = pytest.mark.usefixtures("only_own_blocks")


def host(
    folder: Path, *, used: int = 200 * GIB, limits: dict[str, tuple[int | str, int]] | None = None
) -> HostFiles:
    """A 1 TiB host with ``used`` bytes in use, this process in the unit's cgroup, and the
    cgroups of ``limits`` (memory.max, memory.current) there."""
    return fake_host(folder, total=TIB, available=TIB - used, cgroup=UNIT, limits=limits)


def set_host(files: HostFiles, used: int) -> None:
    files.meminfo.write_text(f"MemTotal: {TIB // KIB} kB\nMemAvailable: {(TIB - used) // KIB} kB\n")


def set_cgroup(
    files: HostFiles, current: int, shmem: int = 0, limit: int | str = 64 * GIB, path: str = UNIT
) -> None:
    """The cgroup ``path``'s memory.max, memory.current and memory.stat (its shmem)."""
    folder = files.cgroup_root / path.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.max").write_text(f"{limit}\n")
    (folder / "memory.current").write_text(f"{current}\n")
    (folder / "memory.stat").write_text(f"anon {current - shmem}\nfile 0\nshmem {shmem}\n")


def cli(
    argv: Sequence[str],
    capsys: pytest.CaptureFixture[str],
    files: HostFiles,
    clock: FakeClock,
    tick: Tick | None = None,
) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``pacer settle ARGV`` on ``files``; ``tick`` hears the
    seconds since the run began each time the run sleeps, after the clock moved."""
    parser = argparse.ArgumentParser(prog="pacer settle")
    settle_cli.add_arguments(parser)
    began = clock.now

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        if tick is not None:
            tick(clock.now - began)

    status = settle_cli.main(parser.parse_args(argv), files, clock, sleep)
    out, err = capsys.readouterr()
    return status, out, err


def base_argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--process-name", "", "--state-file", str(tmp_path / "settle.json"),
            "--window", "10", "--timeout", "60", *extra]  # fmt: skip


# --- which memory is judged -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "limits", "expected"),
    [
        ("auto", {}, Scope("host")),
        ("auto", {UNIT: (64 * GIB, GIB)}, Scope("cgroup", UNIT, 64 * GIB)),
        (
            "auto",
            {"/system.slice": (80 * GIB, 70 * GIB), UNIT: (64 * GIB, GIB)},
            Scope("cgroup", "/system.slice", 80 * GIB),
        ),  # the slice's limit, shared with its other units, leaves less room: it binds
        ("auto", {"/system.slice": ("max", GIB), UNIT: ("max", GIB)}, Scope("host")),
        ("cgroup", {UNIT: (64 * GIB, GIB)}, Scope("cgroup", UNIT, 64 * GIB)),
        ("host", {UNIT: (64 * GIB, GIB)}, Scope("host")),
    ],
    ids=["auto-no-limit", "auto-unit", "auto-slice-binds", "auto-max", "cgroup", "host"],
)
def test_the_scope_is_the_cgroup_whose_limit_binds_as_the_service_finds_it(
    tmp_path: Path, choice: str, limits: dict[str, tuple[int | str, int]], expected: Scope
) -> None:
    files = host(tmp_path, limits=limits)
    assert resolve_scope(choice, files) == expected
    service = HostMemory.read(files).cgroup
    if choice == "auto":
        assert expected.cgroup == (None if service is None else service.path)


def test_a_cgroup_still_holding_the_dead_daemons_memory_is_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clock: FakeClock
) -> None:
    files = host(tmp_path)  # the host is at its baseline all along
    set_cgroup(files, 40 * GIB)

    def drain(t_s: float) -> None:  # what the unit's cgroup still holds, given back
        set_cgroup(files, max(2 * GIB, round(40 * GIB - 4 * GIB * t_s)))

    host_argv = base_argv(tmp_path, "--baseline", "200GiB", "--scope", "host", "--no-record")
    status, out, err = cli([*host_argv, "--timeout", "0"], capsys, files, clock)
    assert (status, out) == (
        0,
        "settled after 0.0 s: used 200.0 GiB of the host (MemTotal - MemAvailable), within "
        "2.0 GiB of the 200.0 GiB baseline\n",
    )
    assert (
        f"pacer settle: cgroup {UNIT}'s memory.max leaves 24.0 GiB, less than the host's "
        "MemAvailable (824.0 GiB): the next pacer is bounded by the cgroup, which was not "
        "judged (--scope cgroup or auto judges it)\n"
    ) in err

    argv = base_argv(tmp_path, "--baseline", "2GiB")
    status, out, err = cli([*argv, "--json"], capsys, files, clock, drain)
    report = json.loads(out)
    assert (status, report["reason"], report["settled_at_s"]) == (0, "baseline", 9.0)
    assert (report["scope"], report["cgroup_path"], report["cgroup_max_bytes"]) == (
        "cgroup",
        UNIT,
        64 * GIB,
    )
    assert [s["used_bytes"] // GIB for s in report["samples"]] == [40, 36, 32, 28, 24, 20, 16,
                                                                   12, 8, 4]  # fmt: skip
    assert "bounded by" not in err  # the cgroup judged is what binds

    set_cgroup(files, 40 * GIB)
    status, out, err = cli([*argv, "--verbose"], capsys, files, clock, drain)
    assert out == (
        f"settled after 9.0 s: used 4.0 GiB of cgroup {UNIT}'s 64.0 GiB memory.max (its "
        "memory.current), within 2.0 GiB of the 2.0 GiB baseline\n"
    )
    lines = err.splitlines()
    assert lines[0] == (
        f"pacer settle: judging cgroup {UNIT}'s memory.current against its memory.max, "
        "64.0 GiB: the limit that binds this process (--scope host judges the host)"
    )
    assert "pacer settle: 0 s: used 40.0 GiB, first sample" in lines
    remembered = json.loads((tmp_path / "settle.json").read_text())
    assert (remembered["scope"], remembered["cgroup_path"], remembered["baseline_bytes"]) == (
        "cgroup",
        UNIT,
        4 * GIB,
    )


def test_memory_other_tenants_use_on_the_host_is_not_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clock: FakeClock
) -> None:
    files = host(tmp_path, used=300 * GIB)
    set_cgroup(files, 3 * GIB)  # the unit's cgroup is at rest

    def tenants(t_s: float) -> None:  # the rest of the host comes and goes by 8 GiB
        set_host(files, 300 * GIB + (8 * GIB if round(t_s) % 2 else 0))

    argv = base_argv(tmp_path, "--no-record")
    status, out, _ = cli([*argv, "--json"], capsys, files, clock, tenants)
    report = json.loads(out)
    assert (status, report["reason"], report["settled_at_s"], report["scope"]) == (
        0,
        "stable",
        10.0,
        "cgroup",
    )
    status, out, err = cli([*argv, "--scope", "host"], capsys, files, clock, tenants)
    assert (status, out) == (1, "not settled after 60 s: the host's used memory varying by "
                                "8.0 GiB over the last 10 s\n")  # fmt: skip
    assert "the next pacer is bounded by the cgroup, which was not judged" in err


def test_where_the_host_binds_a_cgroup_judged_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clock: FakeClock
) -> None:
    files = host(tmp_path, used=TIB - 10 * GIB)  # a host nearly full, its MemAvailable 10 GiB
    set_cgroup(files, 4 * GIB)
    status, out, err = cli(base_argv(tmp_path, "--timeout", "0", "--baseline", "4GiB"), capsys,
                           files, clock)  # fmt: skip
    assert (status, out.split(":")[0]) == (0, "settled after 0.0 s")
    assert (
        f"pacer settle: the host's MemAvailable (10.0 GiB) is no more than the room cgroup "
        f"{UNIT}'s memory.max leaves (60.0 GiB): the next pacer is bounded by the host, which "
        "was not judged (--scope host judges it)\n"
    ) in err


def test_a_limit_lifted_during_the_run_is_a_sampling_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clock: FakeClock
) -> None:
    files = host(tmp_path)
    set_cgroup(files, 40 * GIB)

    def lift(t_s: float) -> None:
        if t_s >= 2:
            set_cgroup(files, 40 * GIB, limit="max")

    status, out, err = cli(base_argv(tmp_path), capsys, files, clock, lift)
    assert (status, out) == (2, "")
    assert err.endswith(
        f"pacer settle: cannot read memory.current of cgroup {UNIT} under {files.cgroup_root}, "
        'or its memory.max is "max" now: the limit it was judged against is gone\n'
    )


# --- a pool kept for the next pacer, in a cgroup ----------------------------------------------

POOL = 24 * KIB  # Holder(slots=2): two blocks of 3 × 1024 uint32


@pytest.fixture
def kept_pool(shm_dir: str) -> Iterator[Holder]:
    """A pool of two slots kept by a process that has ended; dropped after the test."""
    holder = Holder(slots=2)
    holder.close(keep=True)
    yield holder
    sweep(shm_dir, drop_kept=True)


@pytest.mark.parametrize(
    ("current", "shmem", "kept", "settled", "outside"),
    [
        (GIB + POOL, POOL + 8 * KIB, POOL, True, None),  # charged here: a pod's next container
        (GIB, 0, 0, True, "24.0 KiB"),  # charged to the cgroup of the unit or pod before
        (GIB + 8 * KIB, 8 * KIB, 8 * KIB, True, "16.0 KiB"),
        (GIB + POOL, 0, 0, False, "24.0 KiB"),  # not shared memory: not the pool, not free
    ],
    ids=["charged-here", "charged-elsewhere", "partly", "other-memory"],
)
@pytest.mark.slow
def test_a_kept_pool_counts_as_kept_as_far_as_it_is_charged_to_the_cgroup(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    clock: FakeClock,
    kept_pool: Holder,
    shm_dir: str,
    current: int,
    shmem: int,
    kept: int,
    settled: bool,
    outside: str | None,
) -> None:
    files = host(tmp_path)
    set_cgroup(files, current, shmem)
    argv = base_argv(tmp_path, "--timeout", "0", "--baseline", "1GiB", "--tolerance", "4KiB")
    status, out, err = cli([*argv, "--json"], capsys, files, clock)
    sample = json.loads(out)["samples"][0]
    assert (status == 0, sample["used_bytes"], sample.get("kept_bytes", 0)) == (
        settled,
        current,
        kept,
    )
    assert f"kept for the next pacer: 2 blocks, 24.0 KiB in {shm_dir} (pacer {kept_pool.pid}" in err
    told = [line for line in err.splitlines() if "is not in the memory judged" in line]
    assert told == ([] if outside is None else [
        f"pacer settle: {outside} of the pools kept for the next pacer is not in the memory "
        "judged: charged to the cgroup that first wrote it"
    ])  # fmt: skip
    if settled:  # the level at rest, without the pool
        assert json.loads((tmp_path / "settle.json").read_text())["baseline_bytes"] == (
            current - kept
        )


# --- the baseline of each scope ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "scope", "used", "why"),
    [
        ({"baseline_bytes": 200 * GIB}, "cgroup", None, "of the host's used memory, not of cgroup"),
        ({"baseline_bytes": 200 * GIB}, "host", 200 * GIB, None),  # from before scopes: the host's
        (
            {"baseline_bytes": 3 * GIB, "scope": "cgroup", "cgroup_path": UNIT},
            "host",
            None,
            f"of cgroup {UNIT}'s memory.current, not of the host's used memory",
        ),
        (
            {"baseline_bytes": 3 * GIB, "scope": "cgroup", "cgroup_path": UNIT},
            "cgroup",
            3 * GIB,
            None,
        ),
        (
            {"baseline_bytes": 3 * GIB, "scope": "cgroup", "cgroup_path": "/system.slice"},
            "cgroup",
            None,
            "of cgroup /system.slice's memory.current, not of cgroup",
        ),
    ],
    ids=["host-for-cgroup", "unscoped-for-host", "cgroup-for-host", "same-cgroup", "other-cgroup"],
)
def test_a_remembered_baseline_is_used_only_for_the_memory_it_is_of(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    clock: FakeClock,
    state: dict[str, object],
    scope: str,
    used: int | None,
    why: str | None,
) -> None:
    files = host(tmp_path)
    set_cgroup(files, 3 * GIB)
    (tmp_path / "settle.json").write_text(json.dumps({**state, "gpu_baseline_bytes": 5}))
    judged = Scope("host") if scope == "host" else Scope("cgroup", UNIT, 64 * GIB)
    told: list[str] = []
    options = state_module.with_baselines(
        SettleOptions(), tmp_path / "settle.json", judged, told.append
    )
    assert (options.baseline_bytes, options.gpu_baseline_bytes) == (used, 5)
    assert len(told) == (0 if why is None else 1)
    if why is not None:
        assert why in told[0]
        assert told[0].endswith("judged on stability alone until a settled run remembers one")
    status, _, err = cli(base_argv(tmp_path, "--timeout", "0", "--scope", scope), capsys,
                         files, clock)  # fmt: skip
    assert status == (1 if used is None else 0)  # stability needs a window; the baseline not
    assert (why in err) if why is not None else "remembered" not in err


def test_a_state_file_with_an_unknown_scope_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clock: FakeClock
) -> None:
    files = host(tmp_path)
    set_cgroup(files, 3 * GIB)
    state = tmp_path / "settle.json"
    state.write_text(json.dumps({"baseline_bytes": 3 * GIB, "scope": "pod"}))
    status, _, err = cli(base_argv(tmp_path, "--timeout", "0"), capsys, files, clock)
    assert status == 1
    assert err.startswith(
        f'pacer settle: ignoring state file {state}: scope must be "host", or "cgroup" with '
        "a cgroup_path, got 'pod' and None"
    )


# --- bad options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "self_cgroup", "message"),
    [
        (["--scope", "pod"], f"0::{UNIT}\n",
         "--scope: 'pod' is not a scope: give auto (the cgroup whose memory.max limits this "
         "process, where one does, else the host), host (the host's MemTotal - MemAvailable) "
         "or cgroup (that cgroup's memory.current)"),
        (["--scope", "cgroup"], f"0::{UNIT}\n",
         "--scope cgroup: needs a cgroup v2 memory limit (a memory.max other than \"max\") on "
         f"this process's cgroup or an ancestor, and there is none: its cgroup {UNIT} and every "
         "ancestor have memory.max \"max\" (or none readable) under {root}; --scope host or "
         "auto judges the host"),
        (["--scope", "cgroup"], "4:memory:/pacer\n",
         "--scope cgroup: needs a cgroup v2 memory limit (a memory.max other than \"max\") on "
         "this process's cgroup or an ancestor, and there is none: {self_cgroup} names no "
         "cgroup v2 (0::); --scope host or auto judges the host"),
        (["--scope", "cgroup"], None,
         "--scope cgroup: needs a cgroup v2 memory limit (a memory.max other than \"max\") on "
         "this process's cgroup or an ancestor, and there is none: {self_cgroup} cannot be "
         "read ([Errno 2] No such file or directory"),
        (["--scope", "cgroup", "--replay", "{csv}"], f"0::{UNIT}\n",
         "--scope cgroup: not with --replay, which judges the recorded used_bytes, not this "
         "process's cgroup; a replay's baseline is the host's"),
    ],
    ids=["unknown", "no-limit", "cgroup-v1", "no-cgroup-file", "replay"],
)  # fmt: skip
def test_bad_scope_exits_2_naming_the_option_and_the_rule(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    clock: FakeClock,
    argv: list[str],
    self_cgroup: str | None,
    message: str,
) -> None:
    files = host(tmp_path, limits={UNIT: ("max", GIB)})
    if self_cgroup is None:
        files.self_cgroup.unlink()
    else:
        files.self_cgroup.write_text(self_cgroup)
    csv = tmp_path / "ok.csv"
    csv.write_text("t_s,used_bytes\n0,1\n")
    argv = [arg.format(csv=csv) for arg in argv]
    status, out, err = cli([*argv, "--timeout", "0"], capsys, files, clock)
    assert (status, out) == (2, "")
    expected = message.format(root=files.cgroup_root, self_cgroup=files.self_cgroup)
    assert err.startswith(f"pacer settle: {expected}")


def test_a_replay_is_judged_as_recorded_whatever_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clock: FakeClock
) -> None:
    files = host(tmp_path, limits={UNIT: (64 * GIB, GIB)})
    csv = tmp_path / "flat.csv"
    csv.write_text("t_s,used_bytes\n" + "".join(f"{t},{240 * GIB}\n" for t in range(40)))
    for scope in ("auto", "host"):
        status, out, err = cli(["--replay", str(csv), "--scope", scope], capsys, files, clock)
        assert (status, err) == (0, "")
        assert out.startswith("settled after 30.0 s: used 240.0 GiB, stable")


@pytest.mark.parametrize("module", [scope_module, state_module], ids=["scope", "state"])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert (result.attempted > 0, result.failed) == (True, 0)


# --- on this machine's own cgroup ---------------------------------------------------------------


@pytest.mark.slow
def test_the_command_judges_this_machines_cgroup_where_one_limits_it(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "pacer", "settle", "--scope", "cgroup", "--timeout", "0",
            "--process-name", "", "--state-file", str(tmp_path / "s.json"), "--no-record",
            "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    limit = read_cgroup_limit()
    if limit is None:
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr.startswith("pacer settle: --scope cgroup: needs a cgroup v2 memory ")
    else:
        report = json.loads(done.stdout)
        assert (report["scope"], report["cgroup_path"]) == ("cgroup", limit.path)
        assert done.returncode in (0, 1)
    unknown = subprocess.run([*argv[:5], "pod"], env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert (unknown.returncode, unknown.stderr.split(": ")[1]) == (2, "--scope")


@pytest.mark.skipif(read_cgroup_limit() is None, reason="no cgroup memory limit on this process")
@pytest.mark.slow
def test_settles_in_this_cgroup_after_a_child_holding_2gib_is_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limit = read_cgroup_limit()
    assert limit is not None
    code = (
        "import sys\nimport numpy as np\n"
        "held = np.ones(2**28)  # 2 GiB, every page written\n"
        "print('ready', flush=True)\nsys.stdin.read()\n"
    )
    argv = ["--tolerance", "256MiB", "--window", "1", "--interval", "0.1", "--process-name", "",
            "--state-file", str(tmp_path / "settle.json"), "--no-record", "--json",
            "--scope", "cgroup"]  # fmt: skip
    parser = argparse.ArgumentParser(prog="pacer settle")
    settle_cli.add_arguments(parser)
    before = limit.current_bytes
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    with subprocess.Popen([sys.executable, "-c", code], **pipes) as child:  # type: ignore[call-overload]
        assert child.stdout.readline() == "ready\n"
        settle_cli.main(parser.parse_args([*argv, "--baseline", str(before), "--timeout", "0"]))
        held = json.loads(capsys.readouterr().out)
        assert (held["settled"], held["cgroup_path"]) == (False, limit.path)
        assert held["samples"][0]["used_bytes"] - before > 1.5 * GIB

        child.kill()
        started = time.monotonic()
        status = settle_cli.main(parser.parse_args([*argv, "--baseline", str(before),
                                                "--timeout", "30"]))  # fmt: skip
        report = json.loads(capsys.readouterr().out)
        assert (status, report["settled"]) == (0, True)
        assert time.monotonic() - started < 10
