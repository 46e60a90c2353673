"""The room under a queue's limit that a node's claims and results in flight are moving
(decisions 0009, 0011), without a database: what each claim may plan with, and that each
claim's share is given back once."""

from __future__ import annotations

import asyncio

from orbit_server.pulse.claims import LimitRoom
from orbit_server.scope import Scope

Q = (Scope("acme", "prod"), "q")


def test_a_claim_does_not_plan_with_room_another_claim_of_the_node_is_taking() -> None:
    room = LimitRoom(wait_for_results=True)
    first, second = room.claim(), room.claim()
    assert first.plan(Q, free=3, take=2) == 2
    assert second.plan(Q, free=3, take=5) == 1
    assert first.plan(Q, free=3, take=5) == 2  # less the other claim's share, not its own
    first.end()
    first.end()  # ending twice gives back nothing more
    assert room.taking == {Q: 1}
    second.end()
    assert room.taking == {}


async def test_a_claim_plans_with_room_results_are_freeing_until_it_has_counted() -> None:
    room = LimitRoom(wait_for_results=True)
    ended = room.results_started({Q: 2})
    claim = room.claim()
    assert claim.plan(Q, free=0, take=5) == 2
    waiting = asyncio.create_task(claim.before_count())
    await asyncio.sleep(0)
    assert not waiting.done()  # counts once the results have ended
    room.results_ended(ended)
    await waiting
    assert room.freeing == {}
    later = room.results_started({Q: 1})
    assert claim.plan(Q, free=0, take=5) == 0  # it holds the queue's row now
    claim.end()  # a rerun plans anew
    assert claim.plan(Q, free=0, take=5) == 1
    room.results_ended(later)
    claim.end()


async def test_without_concurrent_writers_a_claim_plans_only_with_committed_room() -> None:
    room = LimitRoom(wait_for_results=False)  # SQLite: the results could not commit meanwhile
    room.results_started({Q: 2})
    assert room.claim().plan(Q, free=1, take=5) == 1
