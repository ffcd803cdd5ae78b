"""The status page at ``/``: HTML with its own style and script and nothing from elsewhere,
served by a real in-process service; the browser test is in tests/service."""

from __future__ import annotations

import base64
import hashlib
import re

import aiohttp
import pytest

from pacer.server import Server
from tests.servers import url

pytestmark = pytest.mark.asyncio


def sha256(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


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
