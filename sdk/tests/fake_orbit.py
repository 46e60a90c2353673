"""A fake Orbit for the SDK's client tests: an ``httpx2.MockTransport`` handler that records
every request and answers with prepared replies, and ``call``, which runs one client method
on a ``Client`` or an ``AsyncClient`` over it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx2
import msgspec

from orbit_sdk import AsyncClient, Client, ClientConfig

CONFIG = ClientConfig(url="http://orbit.test:7070", api_key="test-key")
Handler = Callable[[httpx2.Request], httpx2.Response]


class FakeOrbit:
    """A MockTransport handler: records every request and answers with the next reply."""

    def __init__(self, *replies: httpx2.Response | Handler) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply if isinstance(reply, httpx2.Response) else reply(request)

    @property
    def last(self) -> httpx2.Request:
        return self.requests[-1]

    def body(self, index: int = -1) -> Any:
        return msgspec.json.decode(self.requests[index].content)


def ok(json: Any, status: int = 200) -> httpx2.Response:
    return httpx2.Response(status, json=json)


def call_sync(fake: FakeOrbit, method: str, *args: Any, **kwargs: Any) -> Any:
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        return getattr(client, method)(*args, **kwargs)


def call_async(fake: FakeOrbit, method: str, *args: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        transport = httpx2.MockTransport(fake)
        async with AsyncClient.from_config(CONFIG, transport=transport) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(run())
