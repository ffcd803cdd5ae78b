"""The status page in a real browser: headless Chromium loads ``/`` from a real ``pacer
serve``, runs its script, and shows the service's live values; a screenshot is taken."""

from __future__ import annotations

import os
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.servers import ServerFactory, free_port, readyz_refuses
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


@pytest.mark.slow
def test_the_status_page_shows_the_live_service_in_a_browser(
    server_factory: ServerFactory, chromium: str, tmp_path: Path
) -> None:
    server = server_factory().start()
    client = server.client
    ids = [client.submit(2) for _ in range(2)]
    client.wait(ids, poll_s=0.05, timeout_s=120)
    before = client.status()
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
    assert '<span id="state" class="ok">ready</span>' in dom
    for gpu in after["gpus"]:
        row = dom.index(f'<tr data-gpu="{gpu["gpu"]}">')
        strip = dom[row : dom.index("</tr>", row)]
        assert strip.count('% busy"') >= 2, strip  # one share per poll after the first: live

    shot = tmp_path / "status.png"
    browse(chromium, tmp_path / "profile", address, f"--screenshot={shot}")
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
    assert '<span id="state" class="bad">not serving yet: starting; journal failing for ' in dom
    assert f"No such file or directory: '{missing}'</span>" in dom
