"""Worker sessions in the store, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import sessions as sstore
from tests.conftest import OTHER_TENANT, SCOPE

HANDLERS = [{"queue": "emails", "type": "send", "versions": []},
            {"queue": "reports", "type": "build", "versions": ["2"]}]  # fmt: skip


async def open_session(db: Database, clock: FakeClock, session_id: str, node: str) -> None:
    async def unit(tx: Tx) -> None:
        session = sstore.NewSession(session_id, SCOPE, node, "w1", "key_1", 4, HANDLERS)
        await sstore.session_insert(tx, session, clock.now())

    await db.run(unit)


@pytest.mark.covers(
    "session_insert", "session_get", "session_close", "sessions_close_node",
    "sessions_touch_node", "sessions_per_queue", "sessions_prune",
)  # fmt: skip
async def test_sessions_are_counted_while_open_and_seen_then_pruned(
    db: Database, clock: FakeClock
) -> None:
    start = clock.now()
    await open_session(db, clock, "ses_a", "node-a")
    await open_session(db, clock, "ses_b", "node-b")
    found = await db.read(lambda tx: sstore.session_get(tx, "ses_a"))
    assert found is not None and found.handlers == HANDLERS and found.closed_at is None
    counted = await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, start))
    assert counted == {"emails": 2, "reports": 2}
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, OTHER_TENANT, start)) == {}
    clock.advance(timedelta(seconds=30))
    assert await db.run(lambda tx: sstore.sessions_touch_node(tx, "node-a", clock.now())) == 1
    recent = clock.now() - timedelta(seconds=1)
    # node-b stopped refreshing its sessions: they no longer count.
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, recent)) == {
        "emails": 1,
        "reports": 1,
    }
    assert await db.run(lambda tx: sstore.session_close(tx, "ses_a", clock.now()))
    assert not await db.run(lambda tx: sstore.session_close(tx, "ses_a", clock.now()))
    assert await db.run(lambda tx: sstore.sessions_close_node(tx, "node-b", clock.now())) == 1
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, start)) == {}
    clock.advance(timedelta(days=1))
    before = clock.now()
    assert await db.run(lambda tx: sstore.sessions_prune(tx, before, limit=1)) == 1
    assert await db.run(lambda tx: sstore.sessions_prune(tx, before, limit=10)) == 1
    assert await db.read(lambda tx: sstore.session_get(tx, "ses_a")) is None
