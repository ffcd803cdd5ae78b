"""HTTP/1.1 by hand over a real socket: requests no well-behaved client would send."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class Answer:
    """A response: status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


def build(
    method: str,
    path: str | bytes,
    body: bytes = b"",
    headers: Mapping[str, str | bytes] | None = None,
    content_length: bool = True,
) -> bytes:
    """A request's bytes: Host and ``Connection: close`` added, and Content-Length unless
    ``content_length`` is False or ``headers`` give one."""
    target = path.encode() if isinstance(path, str) else path
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1"]
    given = {name.lower() for name in headers or {}}
    for name, value in (headers or {}).items():
        lines.append(name.encode() + b": " + (value.encode() if isinstance(value, str) else value))
    if content_length and "content-length" not in given and "transfer-encoding" not in given:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def exchange(port: int, request: bytes, timeout_s: float = 5.0) -> Answer:
    """Send ``request`` on a new connection and read one response."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await asyncio.wait_for(reader.readexactly(length), timeout_s)
        return Answer(int(status_line.split(" ", 2)[1]), headers, body)
    finally:
        writer.close()


async def closed_within(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    """What the server sends until it closes the connection; TimeoutError if it does not
    close it within ``timeout_s``. A reset counts as closed, with nothing more sent: a server
    that closes while bytes it did not read wait in its socket resets the connection, and
    whether one arrived just before the close is a matter of timing."""
    try:
        return await asyncio.wait_for(reader.read(), timeout_s)
    except ConnectionResetError:
        return b""
