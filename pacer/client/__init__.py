"""pacer's HTTP API from Python: `Client` on aiohttp, `BlockingClient` for code without an
event loop, and the errors both raise."""

from pacer.client.blocking import BlockingClient
from pacer.client.errors import ApiError, ResponseError, UnreachableError
from pacer.client.session import TERMINAL, Client, checked_url

__all__ = [
    "TERMINAL",
    "ApiError",
    "BlockingClient",
    "Client",
    "ResponseError",
    "UnreachableError",
    "checked_url",
]
