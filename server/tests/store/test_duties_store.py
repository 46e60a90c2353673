"""Conformance: node duties (one node at a time holds one for a term), on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import duties as duty_store
from orbit_server.store.duties import DutyTerm

TERM = timedelta(seconds=30)


def term(clock: FakeClock, node: str) -> DutyTerm:
    return DutyTerm("queue-sampler", node, clock.now(), clock.now() + TERM)


@pytest.mark.covers("duty_take", "duty_get")
async def test_one_node_holds_a_duty_until_its_term_ends(db: Database, clock: FakeClock) -> None:
    async def take(node: str) -> bool:
        ask = term(clock, node)
        return await db.run(lambda tx: duty_store.duty_take(tx, ask))

    assert await db.read(lambda tx: duty_store.duty_get(tx, "queue-sampler")) is None
    assert await take("node-a")  # nobody held it
    assert not await take("node-b")  # held by a
    clock.advance(20_000)
    assert await take("node-a")  # a renews: its term now ends 30 s from here
    clock.advance(20_000)
    assert not await take("node-b")  # 40 s after a's first take, but a renewed
    holder = await db.read(lambda tx: duty_store.duty_get(tx, "queue-sampler"))
    assert holder is not None
    assert (holder.holder, holder.expires_at) == ("node-a", clock.now() + timedelta(seconds=10))
    clock.advance(10_000)  # a stopped renewing: its term ends
    assert await take("node-b")
    assert not await take("node-a")
    holder = await db.read(lambda tx: duty_store.duty_get(tx, "queue-sampler"))
    assert holder is not None and holder.holder == "node-b"


@pytest.mark.covers("duty_release")
async def test_a_released_duty_is_free_at_once(db: Database, clock: FakeClock) -> None:
    async def unit(tx: Tx) -> tuple[bool, bool, bool, bool]:
        took = await duty_store.duty_take(tx, term(clock, "node-a"))
        foreign = await duty_store.duty_release(tx, "queue-sampler", "node-b", clock.now())
        own = await duty_store.duty_release(tx, "queue-sampler", "node-a", clock.now())
        other = await duty_store.duty_take(tx, term(clock, "node-b"))
        return took, foreign, own, other

    assert await db.run(unit) == (True, False, True, True)
