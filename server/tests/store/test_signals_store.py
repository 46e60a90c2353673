"""Conformance: the workflow signals' store methods, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import signals as signal_store
from orbit_server.store.base import DuplicateKey
from orbit_server.weave.model import Signal


def signal(clock: FakeClock, signal_id: str, name: str, key: str | None = None) -> Signal:
    return Signal(
        id=signal_id, workflow_id="wf_1", name=name, payload={"from": signal_id},
        idempotency_key=key, state="pending", step_key=None, created_at=clock.now(),
        delivered_at=None,
    )  # fmt: skip


@pytest.mark.covers(
    "workflow_signal_insert", "workflow_signal_get_by_key", "workflow_signal_oldest_pending",
    "workflow_signal_deliver", "workflow_signals_pending", "workflow_signals_delete",
)  # fmt: skip
async def test_signals_wait_in_order_until_delivered_once(db: Database, clock: FakeClock) -> None:
    sent = [signal(clock, "sig_1", "approve", "k1"), signal(clock, "sig_2", "approve"),
            signal(clock, "sig_3", "cancel")]  # fmt: skip
    elsewhere = Signal("sig_9", "wf_2", "approve", None, "k1", "pending", None, clock.now(), None)

    async def send(tx: Tx) -> None:
        for one in [*sent, elsewhere]:  # the same key on another instance: fine
            await signal_store.workflow_signal_insert(tx, one)

    await db.run(send)
    duplicate = signal(clock, "sig_4", "approve", "k1")
    with pytest.raises(DuplicateKey):
        await db.run(lambda tx: signal_store.workflow_signal_insert(tx, duplicate))

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await signal_store.workflow_signal_get_by_key(tx, "wf_1", "k1"),
            await signal_store.workflow_signal_get_by_key(tx, "wf_1", "k9"),
            await signal_store.workflow_signal_oldest_pending(tx, "wf_1", "approve"),
            await signal_store.workflow_signal_oldest_pending(tx, "wf_1", "other"),
            [s.id for s in await signal_store.workflow_signals_pending(tx, "wf_1", limit=10)],
            [s.id for s in await signal_store.workflow_signals_pending(tx, "wf_1", limit=1)],
        )

    assert await db.read(read) == (
        sent[0], None, sent[0], None, ["sig_1", "sig_2", "sig_3"], ["sig_1"],
    )  # fmt: skip
    now = clock.advance(timedelta(seconds=1))

    async def deliver(tx: Tx) -> list[bool]:
        return [
            await signal_store.workflow_signal_deliver(tx, "sig_1", "wait_a", now),
            await signal_store.workflow_signal_deliver(tx, "sig_1", "wait_b", now),
        ]

    assert await db.run(deliver) == [True, False]
    delivered = await db.read(lambda tx: signal_store.workflow_signal_get_by_key(tx, "wf_1", "k1"))
    assert delivered is not None
    assert (delivered.state, delivered.step_key, delivered.delivered_at) == (
        "delivered",
        "wait_a",
        now,
    )
    oldest = await db.read(
        lambda tx: signal_store.workflow_signal_oldest_pending(tx, "wf_1", "approve")
    )
    assert oldest == sent[1]
    assert await db.run(lambda tx: signal_store.workflow_signals_delete(tx, "wf_1")) == 3
    assert await db.read(read) == (None, None, None, None, [], [])
    kept = await db.read(lambda tx: signal_store.workflow_signals_pending(tx, "wf_2", limit=5))
    assert kept == [elsewhere]
