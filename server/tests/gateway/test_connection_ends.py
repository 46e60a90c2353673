"""How the server ends a worker connection, over real sockets on both dialects: a frame nested
too deeply is a protocol error (``invalid_frame``, 4400), a revoked key's connections close
(4401) at once on the node that revoked it and at the next session check on every other, and a
worker that does not read is cut off (4429) down to its TCP connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from pathlib import Path

import pytest

from orbit_server.audit import Actor
from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.gateway import asgi_ws, connection
from orbit_server.governance.keys import Role
from orbit_server.pulse.model import TaskSpec
from tests.conftest import SCOPE
from tests.gateway.conftest import Live, hello, recv
from tests.gateway.test_gateway import closed_with

ACTOR = Actor("test")


async def test_a_frame_nested_too_deeply_is_a_protocol_error(live: Live) -> None:
    async with live.connect() as ws:
        await hello(ws)
        deep = "[" * 20_000 + "]" * 20_000
        await ws.send(
            '{"type": "result", "id": 1, "items": [{"task_id": "t", "attempt": 1,'
            f' "lease_token": "x", "outcome": "succeeded", "result": {deep}}}]}}'
        )
        error = await recv(ws)
        assert (error["type"], error["code"]) == ("error", "invalid_frame")
        assert await closed_with(ws) == 4400


async def test_revoking_a_key_closes_its_connections_on_this_node(live: Live) -> None:
    created = await live.node.keys.create(SCOPE, (Role.WORKER,), actor=ACTOR)
    async with live.connect(created.token) as revoked, live.connect() as other:
        await hello(revoked)
        await hello(other, type_="other")
        await live.node.keys.revoke(created.record.id, actor=ACTOR, scope=SCOPE)
        error = await recv(revoked)
        assert (error["type"], error["code"]) == ("error", "unauthenticated")
        assert await closed_with(revoked) == 4401
        # Work submitted afterwards is not leased to it; the other key's connection stays.
        await live.node.tasks.submit_many(SCOPE, [TaskSpec(queue="emails", type="other")])
        assert (await recv(other))["type"] == "tasks"


async def test_a_key_revoked_on_another_node_closes_at_the_next_session_check(
    live: Live, settings: Settings, clock: FakeClock
) -> None:
    other_node = await build_node(settings, db=live.node.db, clock=clock)
    created = await live.node.keys.create(SCOPE, (Role.WORKER,), actor=ACTOR)
    async with live.connect(created.token) as ws:
        await hello(ws)
        await other_node.keys.revoke(created.record.id, actor=ACTOR, scope=SCOPE)
        await live.gateway.check_sessions()  # what the node does every ORBIT_HEARTBEAT_MS
        assert (await recv(ws))["code"] == "unauthenticated"
        assert await closed_with(ws) == 4401


def _established(port: int) -> int:
    """TCP connections in state ESTABLISHED whose local port is ``port`` (the server's side)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count


def _frame(text: str) -> bytes:
    """A client's text frame, masked with a zero key (the payload stays as it is)."""
    data = text.encode()
    if len(data) < 126:
        head = bytes([0x81, 0x80 | len(data)])
    elif len(data) < 1 << 16:
        head = bytes([0x81, 0x80 | 126]) + len(data).to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + len(data).to_bytes(8, "big")
    return head + b"\0\0\0\0" + data


async def test_a_worker_that_does_not_read_is_cut_off_down_to_its_tcp_connection(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raw client that upgrades, says hello and then only sends heartbeats, never reading
    their answers: once the server's buffers are full it is cut off and its TCP connection is
    gone — not left open with megabytes queued. (The close code, 4429, cannot reach a client
    that does not read; the connection's own test checks it is the one chosen.)"""
    monkeypatch.setattr(asgi_ws, "ABORT_AFTER_S", 0.2)
    monkeypatch.setattr(connection, "SEND_BUFFER_FRAMES", 8)  # fills after a few frames
    port = int(live.url.rsplit(":", 1)[1].split("/")[0])
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    upgrade = (
        f"GET /v1/worker HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {live.key}\r\n\r\n"
    )
    await loop.sock_sendall(sock, upgrade.encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += await loop.sock_recv(sock, 4096)
    assert answer.startswith(b"HTTP/1.1 101")
    hello_frame = {"type": "hello", "protocol": [1], "worker_id": "w", "capacity": 1,
                   "handlers": [{"queue": "emails", "type": "send"}]}  # fmt: skip
    await loop.sock_sendall(sock, _frame(json.dumps(hello_frame)))
    assert _established(port) == 1
    # Heartbeats whose answers (a verdict per item, ~80 kB each) the worker never reads.
    items = [{"task_id": f"tsk_{i:022d}", "attempt": 1, "lease_token": "lse_x"}
             for i in range(1000)]  # fmt: skip
    heartbeat = _frame(json.dumps({"type": "heartbeat", "id": 1, "items": items}))
    try:
        # Well before uvicorn's keepalive (20 s + 20 s) could end it, which may never happen.
        async with asyncio.timeout(30):
            while _established(port):
                with contextlib.suppress(OSError, TimeoutError):
                    async with asyncio.timeout(0.5):  # the server may have stopped reading
                        await loop.sock_sendall(sock, heartbeat)
                await asyncio.sleep(0.01)  # paces the frames; the server's cut ends the loop
    finally:
        sock.close()
    assert live.node.metrics.worker_connections._value.get() == 0
