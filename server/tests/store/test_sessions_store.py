"""Worker sessions in the store, on every dialect."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import sessions as sstore
from orbit_server.store.attempts import attempts_insert
from tests.conftest import OTHER_TENANT, SCOPE
from tests.store.builders import insert, lease, task

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
    assert await db.run(lambda tx: sstore.session_close(tx, "ses_a", clock.now(), "worker_stopped"))
    assert not await db.run(
        lambda tx: sstore.session_close(tx, "ses_a", clock.now(), "worker_stopped")
    )
    assert await db.run(lambda tx: sstore.sessions_close_node(tx, "node-b", clock.now())) == 1
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, start)) == {}
    clock.advance(timedelta(days=1))
    before = clock.now()
    assert await db.run(lambda tx: sstore.sessions_prune(tx, before, limit=1)) == 1
    assert await db.run(lambda tx: sstore.sessions_prune(tx, before, limit=10)) == 1
    assert await db.read(lambda tx: sstore.session_get(tx, "ses_a")) is None


@pytest.mark.covers(
    "sessions_list", "sessions_held_counts", "session_held_attempts", "sessions_open_handlers",
    "sessions_replace",
)  # fmt: skip
async def test_the_workers_view_reads_sessions_their_holdings_and_why_they_ended(
    db: Database, clock: FakeClock
) -> None:
    start = clock.now()

    async def opened(tx: Tx, session_id: str, node: str, worker_id: str) -> None:
        session = sstore.NewSession(
            session_id, SCOPE, node, worker_id, "key_1", 4, HANDLERS, sdk="orbit-sdk/1", protocol=1
        )
        await sstore.session_insert(tx, session, clock.now())

    await db.run(lambda tx: opened(tx, "ses_01", "node-a", "w1"))
    clock.advance(timedelta(seconds=1))
    await db.run(lambda tx: opened(tx, "ses_02", "node-b", "w2"))
    clock.advance(timedelta(seconds=1))
    await db.run(lambda tx: opened(tx, "ses_03", "node-b", "w3"))
    await insert(db, task(clock, "t1"), task(clock, "t2"), task(clock, "t3", queue="reports"))

    async def leased(tx: Tx) -> None:
        tasks = await lease(tx, clock.now(), "t1", "t2", session_id="ses_02")
        await attempts_insert(tx, tasks, clock.now())

    await db.run(leased)

    async def ids(
        ended_after: datetime, queue: str | None = None, before: str = "~", scope: Scope = SCOPE
    ) -> list[str]:
        found = await db.read(
            lambda tx: sstore.sessions_list(
                tx, scope, ended_after=ended_after, queue=queue, before=before, limit=10
            )
        )
        return [r.id for r in found]

    first = await db.read(
        lambda tx: sstore.sessions_list(
            tx, SCOPE, ended_after=start, queue=None, before="~", limit=2
        )
    )
    assert [r.id for r in first] == ["ses_03", "ses_02"]  # newest first
    assert first[0].sdk == "orbit-sdk/1" and first[0].protocol == 1
    assert await ids(start, queue="reports", before="ses_02") == ["ses_01"]
    assert await ids(start, queue="absent") == []
    assert await ids(start, scope=OTHER_TENANT) == []

    counts = await db.read(lambda tx: sstore.sessions_held_counts(tx, ["ses_01", "ses_02"]))
    assert counts == {"ses_02": 2}
    held = await db.read(lambda tx: sstore.session_held_attempts(tx, "ses_02", limit=10))
    assert [(h.task_id, h.state, h.attempt) for h in held] == [("t1", "leased", 1),
                                                               ("t2", "leased", 1)]  # fmt: skip
    assert held[0].leased_at == clock.now() and held[0].lease_expires_at is not None

    # ses_01's node stopped refreshing it; w1 comes back: the stale session is replaced.
    clock.advance(timedelta(seconds=60))
    await db.run(lambda tx: sstore.sessions_touch_node(tx, "node-b", clock.now()))
    seen_before = clock.now() - timedelta(seconds=30)
    replaced = await db.run(
        lambda tx: sstore.sessions_replace(tx, SCOPE, "w1", seen_before, clock.now())
    )
    assert replaced == 1
    assert (
        await db.run(lambda tx: sstore.sessions_replace(tx, SCOPE, "w2", seen_before, clock.now()))
        == 0
    )  # its node refreshes it: still connected
    gone = await db.read(lambda tx: sstore.session_get(tx, "ses_01"))
    assert gone is not None and gone.end_reason == "replaced" and gone.closed_at == clock.now()
    await db.run(lambda tx: sstore.session_close(tx, "ses_03", clock.now(), "drain"))
    ended = await db.read(lambda tx: sstore.session_get(tx, "ses_03"))
    assert ended is not None and ended.end_reason == "drain"

    handlers = await db.read(
        lambda tx: sstore.sessions_open_handlers(tx, SCOPE, clock.now() - timedelta(seconds=1))
    )
    assert handlers == [HANDLERS]  # ses_02 only: open and seen
    # ended within the window, or open
    assert await ids(clock.now() - timedelta(seconds=1)) == ["ses_03", "ses_02", "ses_01"]
    assert await ids(clock.now() + timedelta(seconds=1)) == ["ses_02"]
