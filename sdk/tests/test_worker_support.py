"""A fake Orbit node for the worker tests: it accepts WebSocket connections on 127.0.0.1 and lets
each test play the server's side of the protocol frame by frame. Every frame the worker sends
is checked against the SDK's own frame definitions and must be a text frame."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from types import TracebackType
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from orbit_sdk.worker import Worker
from orbit_sdk.worker._protocol import decode_worker_frame

TIMEOUT = 5.0  # a safety net: every wait in these tests is for an event that must happen


def ts(seconds_from_now: float) -> str:
    """An RFC 3339 timestamp in UTC with milliseconds, as the server writes them."""
    when = datetime.now(UTC) + timedelta(seconds=seconds_from_now)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def delivery(
    task_id: str = "tsk_1",
    attempt: int = 1,
    *,
    queue: str = "q",
    type: str = "t",
    params: Any = None,
    handler_version: str | None = None,
    lease_s: float = 30.0,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "attempt": attempt,
        "lease_token": f"lse_{task_id}_{attempt}",
        "lease_expires_at": ts(lease_s),
        "queue": queue,
        "type": type,
        "params": params,
        "handler_version": handler_version,
        "side_effect": "idempotent",
        "timeout_ms": 300_000,
        "attempts": attempt - 1,
        "max_attempts": 5,
        "labels": {"team": "tests"},
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        **extra,
    }


def ref(task_id: str = "tsk_1", attempt: int = 1) -> dict[str, Any]:
    return {"task_id": task_id, "attempt": attempt, "lease_token": f"lse_{task_id}_{attempt}"}


def keys(items: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(item["task_id"], item["attempt"]) for item in items]


class FakeConnection:
    """One worker connection. Heartbeats are queued apart from the other frames, credits are
    only added up (they may come between any two frames); ``log`` has every frame in order."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.path = ws.request.path if ws.request else ""
        self.headers = ws.request.headers if ws.request else Headers()
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.heartbeats: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.hello: dict[str, Any] | None = None
        self.log: list[dict[str, Any]] = []
        self.credited = 0
        self._credit = asyncio.Event()

    async def pump(self) -> None:
        try:
            async for message in self.ws:
                assert isinstance(message, str), "frames must be text frames"
                decode_worker_frame(message)  # valid by the SDK's own definitions
                frame = json.loads(message)
                self.log.append(frame)
                if frame["type"] == "credit":
                    self.credited += frame["n"]
                    self._credit.set()
                elif frame["type"] == "heartbeat":
                    self.heartbeats.put_nowait(frame)
                else:
                    self.frames.put_nowait(frame)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def expect(self, type: str) -> dict[str, Any]:
        frame = await asyncio.wait_for(self.frames.get(), TIMEOUT)
        assert frame["type"] == type, frame
        return frame

    async def heartbeat_with(self, key: tuple[str, int]) -> dict[str, Any]:
        """The next heartbeat naming the attempt ``key``."""
        while True:
            frame = await asyncio.wait_for(self.heartbeats.get(), TIMEOUT)
            if key in keys(frame["items"]):
                return frame

    async def credits(self, total: int) -> None:
        """Wait until the credits sent on this connection add up to ``total`` (not more)."""
        while self.credited < total:
            self._credit.clear()
            await asyncio.wait_for(self._credit.wait(), TIMEOUT)
        assert self.credited == total

    def types(self) -> list[str]:
        """The types of the frames received so far, heartbeats left out."""
        return [f["type"] for f in self.log if f["type"] != "heartbeat"]

    async def results(self, count: int) -> dict[str, dict[str, Any]]:
        """Read (and ack) result frames until ``count`` items came; items by task id."""
        items: dict[str, dict[str, Any]] = {}
        while len(items) < count:
            frame = await self.expect("result")
            items.update({item["task_id"]: item for item in frame["items"]})
            await self.ack(frame)
        return items

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def welcome(
        self,
        *,
        heartbeat_ms: int = 60_000,
        lease_ms: int = 30_000,
        max_frame_bytes: int = 16 * 1024 * 1024,
        held: Any = None,
    ) -> dict[str, Any]:
        """Read ``hello`` and answer ``welcome`` (``held``: verdict per held attempt, or
        ``None`` to answer ``continue`` for each)."""
        hello = await self.expect("hello")
        self.hello = hello
        if held is None:
            held = [{**h, "verdict": "continue"} for h in hello["held"]]
            for item in held:
                item.pop("lease_token")
        await self.send(
            {
                "type": "welcome",
                "protocol": 1,
                "session_id": "ses_test",
                "node": "fake",
                "lease_ms": lease_ms,
                "heartbeat_ms": heartbeat_ms,
                "max_frame_bytes": max_frame_bytes,
                "held": held,
            }
        )
        return hello

    async def start_all(self, frame: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer a ``start`` (the next one if not given) with ``started`` for every item."""
        frame = frame or await self.expect("start")
        items = [
            {
                "task_id": item["task_id"],
                "attempt": item["attempt"],
                "verdict": "started",
                "lease_expires_at": ts(30),
                "deadline_at": ts(300),
            }
            for item in frame["items"]
        ]
        await self.send({"type": "started", "re": frame["id"], "items": items})
        return frame

    async def ack(self, frame: dict[str, Any], verdict: str = "accepted") -> None:
        items = [
            {"task_id": i["task_id"], "attempt": i["attempt"], "verdict": verdict}
            for i in frame["items"]
        ]
        await self.send({"type": "acked", "re": frame["id"], "items": items})

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.ws.close(code, reason)
        await asyncio.wait_for(self.closed.wait(), TIMEOUT)


class FakeServer:
    """``async with FakeServer() as server``; ``await server.accept()`` gives the next
    connection. ``refuse`` answers every upgrade with that HTTP status instead."""

    def __init__(self, *, refuse: int | None = None) -> None:
        self.connections: asyncio.Queue[FakeConnection] = asyncio.Queue()
        self.refuse = refuse
        self.url = ""
        self._server: Server | None = None

    async def __aenter__(self) -> FakeServer:
        self._server = await serve(
            self._handle, "127.0.0.1", 0, process_request=self._process_request
        )
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def accept(self) -> FakeConnection:
        return await asyncio.wait_for(self.connections.get(), TIMEOUT)

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        if self.refuse is None:
            return None
        body = json.dumps({"error": {"code": "unauthenticated", "message": "unknown key"}})
        return ws.respond(HTTPStatus(self.refuse), body)

    async def _handle(self, ws: ServerConnection) -> None:
        connection = FakeConnection(ws)
        self.connections.put_nowait(connection)
        await connection.pump()


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    """Run the worker in a task; stop it (at once) when the block ends."""
    task = asyncio.create_task(worker.run_async())
    try:
        yield task
    finally:
        if not task.done():
            worker.stop(grace_s=0)
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), TIMEOUT * 2)
