"""The parts of aiohttp that pacer.api.connection reads beyond its public API are there, and
the installed aiohttp is one pyproject.toml allows: an upgrade that moves them fails here first,
by name, rather than as a server that no longer closes slow connections."""

from __future__ import annotations

import asyncio
import inspect
import tomllib
from importlib.metadata import version

import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from packaging.requirements import Requirement

from tests.servers import ROOT


def declared(name: str) -> Requirement:
    """pacer's requirement on ``name``, as pyproject.toml declares it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return next(r for r in map(Requirement, project["dependencies"]) if r.name == name)


def test_aiohttp_is_pinned_below_the_next_minor_and_installed_within() -> None:
    requirement = declared("aiohttp")
    assert any(s.operator == "<" for s in requirement.specifier), "no upper bound"
    assert requirement.specifier.contains(version("aiohttp")), version("aiohttp")


@pytest.mark.asyncio
async def test_the_private_members_pacer_reads_are_there() -> None:
    assert inspect.iscoroutinefunction(web.AppRunner._make_server)

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    server = web.Server(answer, loop=asyncio.get_running_loop())
    assert isinstance(server._kwargs, dict)  # the connection settings, passed on
    handler = server()
    assert isinstance(handler, RequestHandler)
    assert not handler._messages  # a parsed request head waits here
    assert handler._request_in_progress is False  # a handler runs
    assert handler._loop is asyncio.get_running_loop()
    for method in ("connection_made", "data_received", "connection_lost", "force_close",
                   "handle_error", "log_exception"):  # fmt: skip
        assert callable(getattr(handler, method)), method
    await server.shutdown(0)
