"""A connection's send buffer is bounded: a worker that stops reading is cut off instead of
growing the server's memory (SPEC D4)."""

from __future__ import annotations

import asyncio

import pytest

from orbit_server.gateway import protocol as p
from orbit_server.gateway.coalesce import Coalescer
from orbit_server.gateway.connection import SEND_BUFFER_FRAMES, Connection, SlowConsumer
from orbit_server.gateway.dispatch import Dispatcher
from orbit_server.pulse.worker import Session
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE


async def test_a_full_send_buffer_cuts_the_worker_off(node: Node) -> None:
    async def never_written(text: str) -> None:
        await asyncio.Event().wait()  # the socket does not drain

    conn = Connection(
        session=Session("ses_1", "node", "w"), scope=SCOPE, key_id="key_1",
        handlers=[p.Handler(queue="q", type="t")], capacity=1, workers=node.workers,
        coalescer=Coalescer.of(node.workers),
        dispatcher=Dispatcher(node.workers, node.watch, node.metrics, max_leases=10),
        clock=node.clock, metrics=node.metrics, send_text=never_written,
    )  # fmt: skip
    for _ in range(SEND_BUFFER_FRAMES):  # the writer is stuck: frames wait in the buffer
        conn.send(p.Drain(grace_ms=0))
    with pytest.raises(SlowConsumer):
        conn.send(p.Drain(grace_ms=0))
    assert conn.closed.is_set() and conn.close_code == 4429
    conn.send(p.Drain(grace_ms=0))  # after the cut nothing more is queued, nothing raises
