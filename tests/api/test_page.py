"""The status page at ``/``: HTML with its own style and script and nothing from elsewhere,
served by a real in-process service; the browser test is in tests/service."""

from __future__ import annotations

import base64
import hashlib
import re

import aiohttp
import pytest

from pacer.api import page
from pacer.server import Server
from tests.servers import url


def sha256(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


@pytest.mark.asyncio
async def test_the_page_is_html_whose_policy_allows_only_its_own_script_and_style(
    server: Server,
) -> None:
    async with aiohttp.ClientSession() as session, session.get(url(server, "/")) as answer:
        assert answer.status == 200
        assert answer.content_type == "text/html"
        policy = answer.headers["Content-Security-Policy"]
        html = await answer.text()
    (script,) = re.findall(r"<script>(.*?)</script>", html, re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert f"script-src '{sha256(script)}';" in policy
    assert f"style-src '{sha256(style)}';" in policy
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from elsewhere
    assert 'fetch(path, {cache: "no-store"})' in script
    assert '"v1/status"' in script  # relative: a path prefix behind a proxy still works


@pytest.mark.asyncio
async def test_the_page_answers_while_the_service_is_not_ready(server: Server) -> None:
    server.service.ready = False
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url(server, "/")) as page:
                assert page.status == 200
            async with session.get(url(server, "/v1/status")) as status:
                assert status.status == 503  # what the page's script shows as its reason
                assert (await status.json())["error"].startswith("not serving yet")
    finally:
        server.service.ready = True


def luminance(colour: str) -> float:
    """The relative luminance of ``#rgb`` or ``#rrggbb`` (WCAG 2)."""
    digits = colour.lstrip("#")
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    channels = [int(digits[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_every_text_colour_of_the_page_reads_well_on_its_background() -> None:
    (background,) = re.findall(r"background: (#[0-9a-f]+);", page.STYLE.split("}")[0])
    colours = re.findall(r"(?<![-\w])color: (#[0-9a-f]+)", page.STYLE)
    assert len(colours) >= 5
    bright = luminance(background)
    for colour in colours:
        ratio = (bright + 0.05) / (luminance(colour) + 0.05)
        assert ratio >= 4.5, f"{colour} on {background}: contrast {ratio:.2f}, WCAG AA wants 4.5"


def test_each_section_has_a_heading_and_a_table_with_headers() -> None:
    sections = re.split(r"<h2[^>]*>", page.BODY)[1:]
    assert len(sections) == 5  # controller, memory, GPUs or workers, engine sessions, jobs
    for section in sections:
        assert section.count("<table>") == 1, section
        assert "<caption" in section, section
        assert re.search(r'<th scope="(row|col)"', section), section
    assert page.BODY.count("<h1>") == 1
    assert "<th>" not in page.BODY  # every header cell says what it heads


def test_the_script_waits_while_hidden_and_after_errors() -> None:
    script = page.SCRIPT
    assert 'document.visibilityState !== "hidden"' in script
    assert 'addEventListener("visibilitychange"' in script
    assert 'answer.headers.get("Retry-After")' in script
    assert f"BACKOFF_MAX_MS = {page.BACKOFF_MAX_MS}" in script
    assert "@" not in script  # every placeholder filled
