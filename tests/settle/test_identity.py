"""`pacer settle` tells a pacer by more than its PID (its owner file: PID namespace, start
time, boot), with real processes: a PID reused by an unrelated process is not that pacer; a
live pacer in another PID namespace keeps its blocks and its synthesis processes; another
program's multiprocessing child that maps a block is named, never killed; command lines are
shown on one line."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu.shm.blocks import BLOCK_PREFIX, create_block, remove_stale_blocks
from gpu.shm.identity import OWNER_PREFIX, ProcessIdentity, owner_path, start_ticks
from pacer.settle.held import HeldBlockScanner, ReportedHolders
from pacer.settle.sources import ProcessScanner
from tests.waits import wait_until

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def python(code: str, *argv: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """A child running ``code`` from the repository root with ``-c``, through ``prefix`` (the
    interpreter by default), in a session of its own."""
    return subprocess.Popen(
        [*(prefix or (sys.executable,)), "-c", textwrap.dedent(code), *argv],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
    )  # fmt: skip


def end(child: subprocess.Popen[str]) -> None:
    """Kill ``child`` and every process of its session (a forkserver's children among them)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)  # reaped, its pipes closed


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    made: list[subprocess.Popen[str]] = []
    yield made
    for child in made:
        end(child)


def dead_pacers_block(shm_dir: str) -> str:
    """A block and owner file left by a pacer killed outright; the block's name."""
    code = """
        import os, signal, sys
        from gpu.shm.blocks import create_block
        block = create_block(4096, directory=sys.argv[1])
        print(block.name, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
    out, _ = python(code, shm_dir).communicate(timeout=60)
    return out.strip()


def test_a_pid_reused_by_an_unrelated_process_is_not_that_pacer(
    shm_dir: str, children: list[subprocess.Popen[str]]
) -> None:
    unrelated = python("import sys; print('ready', flush=True); sys.stdin.read()")
    children.append(unrelated)
    assert unrelated.stdout is not None
    assert unrelated.stdout.readline() == "ready\n"
    started = start_ticks(unrelated.pid)
    assert started is not None
    # The pacer that had this PID before: same PID, boot and namespace, an earlier start.
    earlier = ProcessIdentity.of_self()
    earlier = ProcessIdentity(unrelated.pid, earlier.pid_ns, started - 1, earlier.boot_id)
    Path(owner_path(shm_dir, earlier)).write_text(earlier.to_json())
    block = f"{BLOCK_PREFIX}{unrelated.pid}-0"
    Path(shm_dir, block).write_bytes(b"\0" * 4096)
    assert earlier.live_pid() is None
    assert ProcessIdentity(unrelated.pid, earlier.pid_ns, started, earlier.boot_id).live_pid() == (
        unrelated.pid
    )
    assert remove_stale_blocks(shm_dir) == (1, 4096)  # its pacer is gone, whoever has the PID
    assert os.listdir(shm_dir) == []  # the owner file too
    assert unrelated.poll() is None


def test_a_live_pacer_in_another_pid_namespace_keeps_its_blocks_and_workers(
    shm_dir: str, children: list[subprocess.Popen[str]]
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here")
    # PID 1 of a new PID namespace makes a block (and its owner file); its child, named as
    # pacer's synthesis processes are, maps it. Both share this directory with us.
    code = """
        import os, sys
        from gpu.procs.lifeline import name_process
        from gpu.shm.blocks import create_block, open_block
        block = create_block(4096, directory=sys.argv[1])
        if os.fork() == 0:
            name_process("pacer-synth")
            mapped = open_block(block.name, directory=sys.argv[1])
            print(os.getpid(), block.name, flush=True)
            sys.stdin.read()
            os._exit(0)
        os.wait()
    """
    pacer = python(code, shm_dir, prefix=("unshare", "-Urpf", "--mount-proc", sys.executable))
    children.append(pacer)
    assert pacer.stdout is not None
    line = pacer.stdout.readline().split()
    if not line:
        pytest.skip("unshare cannot make a PID namespace here")
    assert line == ["2", f"{BLOCK_PREFIX}1-0"]  # PIDs of its own namespace
    [owner] = [name for name in os.listdir(shm_dir) if name.startswith(OWNER_PREFIX)]
    identity = ProcessIdentity.from_json(Path(shm_dir, owner).read_text())
    assert identity.pid == 1
    assert identity.pid_ns != ProcessIdentity.of_self().pid_ns
    assert identity.live_pid() is not None  # found here, under its PID on this side
    told: list[str] = []
    killed: list[int] = []

    def kill(holder: object) -> bool:
        killed.append(getattr(holder, "pid", 0))
        return True

    held = ReportedHolders(HeldBlockScanner(directory=shm_dir), told.append, True, kill)()
    assert (held.holders, told, killed) == ((), [], [])
    assert remove_stale_blocks(shm_dir) == (0, 0)
    assert sorted(os.listdir(shm_dir)) == sorted([f"{BLOCK_PREFIX}1-0", owner])
    end(pacer)  # the namespace's PID 1 ends, and with it every process in it
    wait_until(lambda: identity.live_pid(), "the pacer to be gone", done=lambda pid: pid is None)
    assert remove_stale_blocks(shm_dir)[0] == 1
    assert os.listdir(shm_dir) == []


def test_another_programs_multiprocessing_child_that_maps_a_block_is_not_killed(
    shm_dir: str, children: list[subprocess.Popen[str]]
) -> None:
    name = dead_pacers_block(shm_dir)
    # Another program, with a command line of several lines, maps the block itself and in a
    # child of multiprocessing's forkserver.
    code = """
        import multiprocessing, sys
        from gpu.shm.blocks import open_block
        from tests.settle.holding import hold
        if __name__ == "__main__":
            multiprocessing.set_start_method("forkserver")
            mine = open_block(sys.argv[2], directory=sys.argv[1])
            child = multiprocessing.Process(target=hold, args=(sys.argv[1], sys.argv[2]))
            child.start()
            child.join()
    """
    other = python(textwrap.dedent(code) + "# " + "x" * 100, shm_dir, name)
    children.append(other)
    assert other.stdout is not None
    assert other.stdout.readline() == "ready\n"  # from its child, which maps the block
    told: list[str] = []
    held = ReportedHolders(HeldBlockScanner(directory=shm_dir), told.append, True)()
    # The program and its forkserver's child (pids wrap around: not told apart by order).
    assert other.pid in {h.pid for h in held.holders}
    assert len(held.holders) == 2
    assert not any(h.synthesis for h in held.holders)
    assert all(line.endswith(": not a pacer synthesis process, so not killed") for line in told)
    assert all("\n" not in line for line in told)
    [parent] = [line for line in told if f"process {other.pid} (" in line]
    assert f"process {other.pid} ({sys.executable} -c import multiprocessing, sys " in parent
    assert "…) maps 1 pool block of dead pacer" in parent  # cut, with an ellipsis
    assert other.poll() is None  # nothing was killed
    end(other)
    wait_until(lambda: HeldBlockScanner(directory=shm_dir)().holders, "the holders to end",
               done=lambda holders: not holders)  # fmt: skip
    remove_stale_blocks(shm_dir)
    assert os.listdir(shm_dir) == []


def test_a_block_made_here_is_owned_by_this_process_until_it_is_removed(shm_dir: str) -> None:
    block = create_block(4096, directory=shm_dir)
    [owner] = [name for name in os.listdir(shm_dir) if name.startswith(OWNER_PREFIX)]
    assert oct(os.stat(os.path.join(shm_dir, owner)).st_mode & 0o777) == "0o600"
    assert ProcessIdentity.from_json(Path(shm_dir, owner).read_text()).live_pid() == os.getpid()
    block.unlink()
    assert os.listdir(shm_dir) == []


def test_settle_waits_only_for_pacer_services_of_the_name(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    # The kernel names a process after the file it runs: a link gives comm "pacer-XXXXXXXX",
    # this test's own name, so that a copy of the suite beside it is not counted.
    name = f"pacer-{secrets.token_hex(4)}"
    exe = tmp_path / name
    exe.symlink_to(sys.executable)
    code = "import sys; print('ready', flush=True); sys.stdin.read()"
    client = python(code, "status", prefix=(str(exe),))  # another program of the name
    service = python(code, "serve", prefix=(str(exe),))
    children += [client, service]
    for child in (client, service):
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    assert [p.pid for p in ProcessScanner(name)()] == [service.pid]
