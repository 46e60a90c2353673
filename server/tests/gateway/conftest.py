"""A node served by a real uvicorn on a free port, and a raw protocol client, so that the
WebSocket handshake, the frames and the close codes are the real ones."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from orbit_server.bootstrap import build_app
from orbit_server.gateway.asgi_ws import WorkerWebSocketProtocol
from orbit_server.gateway.endpoint import Gateway
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, make_key, shared_litestar


@dataclass
class Live:
    node: Node
    url: str  # ws://127.0.0.1:port/v1/worker
    key: str  # a worker key of SCOPE
    gateway: Gateway

    def connect(self, key: str | None = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        return connect(self.url, additional_headers=headers, **kwargs)


class _Server(uvicorn.Server):
    """uvicorn's server, told to stop by an event: its own loop would notice ``should_exit``
    only at its next tick, up to 0.1 s later, at the end of every test."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()
        self.stopping = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()

    async def main_loop(self) -> None:
        await self.on_tick(0)  # what the first tick does: the Date header
        await self.stopping.wait()

    def stop(self) -> None:
        self.should_exit = True
        self.stopping.set()


@pytest.fixture
async def live(node: Node) -> AsyncIterator[Live]:
    app = build_app(node, litestar=shared_litestar(node.settings))
    assert isinstance(app.worker_endpoint, Gateway)
    await app.worker_endpoint.start()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, ws=WorkerWebSocketProtocol, lifespan="off", log_config=None, access_log=False,
        ws_max_size=node.settings.ws_max_frame_bytes,
    )  # fmt: skip
    server = _Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    await server.listening.wait()
    port = sock.getsockname()[1]
    key = await make_key(node, SCOPE, Role.WORKER)
    try:
        yield Live(node, f"ws://127.0.0.1:{port}/v1/worker", key, app.worker_endpoint)
    finally:
        await app.worker_endpoint.drain()
        server.stop()
        await serving
        sock.close()
    # Whatever the test did, the node's slots add up (decision 0022); with every connection
    # gone, none is left counted.
    ledger = app.worker_endpoint.dispatcher.ledger
    ledger.check()
    if not list(ledger.accounts()):
        assert ledger.inflight == 0


async def send(ws: ClientConnection, frame: dict[str, Any]) -> None:
    await ws.send(json.dumps(frame))


async def recv(ws: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        data = await ws.recv()
    frame: dict[str, Any] = json.loads(data)
    return frame


async def hello(
    ws: ClientConnection,
    *,
    queue: str = "emails",
    type_: str = "send",
    capacity: int = 10,
    held: list[dict[str, Any]] | None = None,
    versions: list[str] | None = None,
) -> dict[str, Any]:
    await send(
        ws,
        {
            "type": "hello",
            "protocol": [1],
            "worker_id": "test-worker",
            "handlers": [{"queue": queue, "type": type_, "versions": versions or []}],
            "capacity": capacity,
            "held": held or [],
        },
    )
    welcome = await recv(ws)
    assert welcome["type"] == "welcome", welcome
    return welcome


def ref(delivery: dict[str, Any]) -> dict[str, Any]:
    return {k: delivery[k] for k in ("task_id", "attempt", "lease_token")}
