"""The status page in a real browser: headless Chromium loads ``/`` from a real ``pacer
serve``, runs its script, and shows the service's live values, its CPU proving workers and an
engine session of the reference engine; a screenshot is taken."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pacer.control.policy import Mode
from tests.servers import ROOT, ServerFactory, free_port, readyz_refuses
from tests.waits import wait_until

WINDOW = (1100, 800)
BROWSER_S = 120.0  # how long one Chromium run may take on a loaded machine


def browse(chromium: str, profile: Path, address: str, *args: str) -> str:
    """Run headless Chromium on ``address`` for 10 s of the page's (virtual) time, its script
    polling meanwhile; what it printed."""
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", *args, address]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_S,
                          env={**os.environ, "HOME": str(profile)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def png_image(path: Path) -> tuple[int, int, bytes]:
    """A PNG's width, height and its scanlines (filtered, as stored)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    chunks, at = [], 8
    while at < len(data):
        (size,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        if kind == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + size])
        at += size + 12
    return width, height, zlib.decompress(b"".join(chunks))


def engine_process(port: int, name: str) -> subprocess.Popen[str]:
    """The reference engine (examples/engine.py) paced by the pacer on ``port``, with work for
    far longer than a test takes: it is killed after."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "engine.py"), "--url",
         f"ws://127.0.0.1:{port}/v1/engine", "--engine", name, "--workload-key", f"key-{name}",
         "--partitions", "100000", "--synthesis-s", "0.2", "--gpu-s", "0.1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_the_status_page_shows_the_live_service_in_a_browser(
    server_factory: ServerFactory, chromium: str, tmp_path: Path
) -> None:
    # A host without GPUs: the page speaks of CPU proving workers, as `pacer status` does.
    server = server_factory(PACER_GPU__DEVICES="none").start()
    client = server.client
    ids = [client.submit(2) for _ in range(2)]
    client.wait(ids, poll_s=0.05, timeout_s=120)
    before = client.status()
    assert before["plan"]["gpu_model"] == "none"
    address = f"http://127.0.0.1:{server.port}/"
    dom = browse(chromium, tmp_path / "profile", address, "--dump-dom")
    after = client.status()

    for job_id in ids:
        assert f'<tr data-job="{job_id}"><td class="mono">{job_id}</td><td>completed</td>' in dom
    modes = {s["controller"]["terms"]["mode"] for s in (before, after)}
    assert any(f'<td id="controller-mode">{mode}</td>' in dom for mode in modes), dom
    assert '<td id="controller-policy">pi</td>' in dom
    budget = after["memory"]["budget_bytes"] / 2**30
    assert f"0.00 GiB of {budget:.2f} GiB in flight" in dom
    assert "completed 2" in dom  # the job counts
    assert '<span id="state" class="ok" role="status">ready</span>' in dom
    assert '<h2 id="gpus-title">Workers (CPU prover)</h2>' in dom
    assert '<th scope="col" id="gpus-what">worker</th>' in dom
    assert '<span id="engines-none">no engine sessions</span>' in dom
    for gpu in after["gpus"]:
        row = dom.index(f'<tr data-gpu="{gpu["gpu"]}">')
        strip = dom[row : dom.index("</tr>", row)]
        assert strip.count('% busy"') >= 2, strip  # one share per poll after the first: live

    engine = engine_process(server.port, "page-a")
    try:
        wait_until(lambda: client.status()["engines"], "the engine's session", timeout_s=60)
        dom = browse(chromium, tmp_path / "profile", address, "--dump-dom")
        (session,) = client.status()["engines"]
        shot = tmp_path / "status.png"
        browse(chromium, tmp_path / "profile", address, f"--screenshot={shot}")
    finally:
        engine.kill()
        engine.wait()
    assert '<span id="engines-none"></span>' in dom
    row = dom.index('<tr data-engine="{}">'.format(session["session"]))
    cells = re.findall(r"<td[^>]*>(.*?)</td>", dom[row : dom.index("</tr>", row)])
    assert cells[:2] == ["page-a", "connected"], cells
    assert cells[2] in {str(mode) for mode in Mode}, cells
    # The projected depth is negative while less is in flight than the GPUs take in a lead.
    assert re.fullmatch(r"\d+ ready, -?[\d.]+ projected / [\d.]+", cells[4]), cells
    assert re.fullmatch(r"\d+ \([\d.]+ GiB of [\d.]+ GiB\)", cells[5]), cells
    assert re.fullmatch(r"\d+ of {} busy".format(session["gpu_workers"]), cells[6]), cells
    assert cells[7].count('% busy"') >= 2, cells  # the engine's GPU strip: live
    assert re.fullmatch(r"\d+ \(0 refused\)", cells[8]), cells

    width, height, pixels = png_image(shot)
    assert (width, height) == WINDOW
    assert len(set(pixels)) > 16  # drawn, not a blank page


@pytest.mark.slow
def test_the_status_page_of_a_service_starting_says_why_it_is_not_ready(
    server_factory: ServerFactory, chromium: str, tmp_path: Path
) -> None:
    missing = tmp_path / "not-mounted-yet" / "journal.sqlite"
    server = server_factory(PACER_JOURNAL__PATH=str(missing),
                            PACER_API__PORT=str(free_port())).launch()  # fmt: skip
    wait_until(lambda: readyz_refuses(server.client, "No such file or directory"),
               "/readyz to name the missing journal")  # fmt: skip
    dom = browse(chromium, tmp_path / "profile", f"http://127.0.0.1:{server.port}/", "--dump-dom")
    state = '<span id="state" class="bad" role="status">'
    assert state + "not serving yet: starting; journal failing for " in dom
    assert f"No such file or directory: '{missing}'</span>" in dom
    # Each 503 says Retry-After: 1; the page waits longer after each error all the same.
    waits = re.findall(r'<span id="retry">next try in (\d+) s</span>', dom)
    assert waits, dom
    assert int(waits[0]) >= 4, waits  # 2 s, then 4 s, then 8 s ...
