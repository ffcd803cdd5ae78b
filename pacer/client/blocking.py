"""`BlockingClient`: `Client`'s calls for code that runs no event loop (the ``pacer`` commands).

>>> pacer = BlockingClient("http://127.0.0.1:9470")
>>> pacer.status()["ready"]  # doctest: +SKIP
True
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, Unpack

from pacer.client.errors import ApiError
from pacer.client.session import Client, Options, Progress

T = TypeVar("T")


class BlockingClient:
    """`Client`'s calls, each run to its end before it returns. Every call opens a session and
    an event loop of its own and closes both, so there is nothing to close; it cannot be
    called from a running event loop (use `Client` there). The arguments are `Client`'s;
    ValueError at construction as for `Client`."""

    def __init__(self, base_url: str, token: str | None = None, **options: Unpack[Options]) -> None:
        self._args = (base_url, token, options)
        self.base_url = self._client().base_url  # ValueError here, where it is wrong

    def _client(self) -> Client:
        base_url, token, options = self._args
        return Client(base_url, token, **options)

    def run(self, call: Callable[[Client], Awaitable[T]]) -> T:
        """``call(client)`` on a `Client` of this address, run to its end; what it returns."""

        async def once() -> T:
            async with self._client() as client:
                return await call(client)

        return asyncio.run(once())

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        """`Client.request`."""
        return self.run(lambda client: client.request(method, path, body, headers))

    def wait_ready(
        self,
        timeout_s: float,
        path: str = "/readyz",
        waiting: Callable[[float, ApiError], None] | None = None,
        unreachable_s: float | None = None,
    ) -> float:
        """`Client.wait_ready`: the seconds it took."""
        return self.run(lambda client: client.wait_ready(timeout_s, path, waiting, unreachable_s))

    def submit(
        self, partitions: int, params: dict[str, Any] | None = None, priority: int = 0,
        idempotency_key: str | None = None,
    ) -> str:  # fmt: skip
        """`Client.submit`: the job's id."""
        return self.run(lambda client: client.submit(partitions, params, priority, idempotency_key))

    def job(self, job_id: str) -> dict[str, Any]:
        """`Client.job`."""
        return self.run(lambda client: client.job(job_id))

    def jobs(
        self, state: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        """`Client.jobs`: a page of jobs."""
        return self.run(lambda client: client.jobs(state, limit, cursor))

    def partitions(self, job_id: str, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """`Client.partitions`."""
        return self.run(lambda client: client.partitions(job_id, offset, limit))

    def cancel(self, job_id: str) -> dict[str, Any]:
        """`Client.cancel`."""
        return self.run(lambda client: client.cancel(job_id))

    def status(self) -> dict[str, Any]:
        """`Client.status`."""
        return self.run(lambda client: client.status())

    def wait(
        self,
        job_ids: Sequence[str],
        progress: Progress | None = None,
        poll_s: float = 0.5,
        timeout_s: float | None = None,
    ) -> list[dict[str, Any]]:
        """`Client.wait`."""
        return self.run(lambda client: client.wait(job_ids, progress, poll_s, timeout_s))
