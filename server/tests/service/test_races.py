"""Races on a real MariaDB, several connections at once (SQLite has a single writer, so these
interleavings cannot happen there). Steps are ordered by events and by InnoDB's own view of
lock waits, never by sleeping."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from orbit_server.audit import Actor
from orbit_server.pulse.claims import Claims
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.service import QueueSettings
from orbit_server.pulse.worker import ClaimRequest, Lease, Session, StartVerdict, Want
from orbit_server.runtime.node import Node
from orbit_server.store import Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store
from tests.conftest import SCOPE
from tests.store.test_backends import wait_for_lock_waiters

ACTOR = Actor("test")


@pytest.fixture(autouse=True)
def mariadb_only(node: Node) -> None:
    if node.db.dialect != "mysql":
        pytest.skip("SQLite serialises writers: these interleavings cannot occur")


def sessions(n: int) -> list[Session]:
    return [Session(f"s{i}", f"node-{i}", f"w{i}") for i in range(n)]


async def submit(node: Node, count: int, **fields: object) -> None:
    spec = TaskSpec(**{"queue": "q", "type": "t", **fields})  # type: ignore[arg-type]
    await node.tasks.submit_many(SCOPE, [spec] * count)


async def test_overlapping_claimers_skip_each_others_rows(node: Node) -> None:
    await submit(node, 20)
    both_selected = asyncio.Barrier(2)

    async def hold_candidates(tx: Tx) -> set[str]:
        rows = await ready_store.ready_candidates(tx, SCOPE, "q", "t", limit=5)
        await both_selected.wait()  # both transactions hold their locks at the same time
        return {r.task_id for r in rows}

    first, second = await asyncio.gather(node.db.run(hold_candidates), node.db.run(hold_candidates))
    assert len(first) == len(second) == 5 and not first & second


async def test_a_claim_and_a_submit_to_one_queue_both_go_through(node: Node) -> None:
    await submit(node, 5)
    claimed, release = asyncio.Event(), asyncio.Event()

    async def slow_claim(tx: Tx) -> int:
        rows = await ready_store.ready_candidates(tx, SCOPE, "q", "t", limit=5)
        await queue_store.queue_get(tx, SCOPE, "q", lock=True)
        claimed.set()
        await release.wait()
        return len(rows)

    claiming = asyncio.create_task(node.db.run(slow_claim))
    await claimed.wait()
    submitting = asyncio.create_task(submit(node, 1))
    await wait_for_lock_waiters(node.db, 1)  # the submit waits for the claim's queue row
    release.set()
    assert await claiming == 5
    await submitting  # no lock wait timeout: it went through once the claim committed
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and q.pending == 6


async def test_the_queue_limit_holds_against_concurrent_claims(node: Node) -> None:
    await node.queues.update(SCOPE, "q", QueueSettings(concurrency_limit=3), actor=ACTOR)
    await submit(node, 30)
    batches = await asyncio.gather(
        *(node.workers.claim(SCOPE, s, [Want("q", "t", 10)], limit=10) for s in sessions(5))
    )
    assert sum(len(b) for b in batches) == 3
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and q.active == 3


async def test_key_exclusion_holds_against_concurrent_claims(node: Node) -> None:
    await submit(node, 10, concurrency_key="user-1")
    await submit(node, 10, concurrency_key="user-2")
    batches = await asyncio.gather(
        *(node.workers.claim(SCOPE, s, [Want("q", "t", 10)], limit=10) for s in sessions(5))
    )
    keys = sorted(lease.task.concurrency_key or "" for b in batches for lease in b)
    assert keys == ["user-1", "user-2"]


@pytest.mark.parametrize("limit", ["queue", "key"])
async def test_a_claim_waits_for_the_permits_of_a_claim_in_flight(node: Node, limit: str) -> None:
    """Step by step: claim A (another node's) has taken permits and not committed; claim B
    starts. Under a queue limit, B waits on the queue row and after A commits sees A's permits
    taken. With keys, B finds nothing at once: A holds each key's one admitted row (SKIP LOCKED
    passes over them) and the keys' other tasks are outside the claim range (decision 0004)."""
    if limit == "queue":
        await node.queues.update(SCOPE, "q", QueueSettings(concurrency_limit=2), actor=ACTOR)
        await submit(node, 10)
    else:
        await submit(node, 5, concurrency_key="user-1")
        await submit(node, 5, concurrency_key="user-2")
    first, second = sessions(2)
    holding, release = asyncio.Event(), asyncio.Event()
    other_node = Claims(node.db, node.clock, lease=timedelta(minutes=1))

    async def claim_and_hold(tx: Tx) -> int:
        request = ClaimRequest(first, (Want("q", "t", 10),), 10)
        room = other_node.room.claim()
        leases = await other_node._claim_for(tx, SCOPE, request, node.clock.now(), room)
        holding.set()
        await release.wait()
        return len(leases)

    a = asyncio.create_task(node.db.run(claim_and_hold))
    await holding.wait()
    b = asyncio.create_task(node.workers.claim(SCOPE, second, [Want("q", "t", 10)], limit=10))
    if limit == "queue":
        await wait_for_lock_waiters(node.db, 1)  # B waits for A's queue row
    else:
        assert await b == []  # while A has not committed
    release.set()
    assert await a == 2 and await b == []
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and (q.active, q.pending) == (2, 8)


@pytest.mark.parametrize("results", ["commit", "roll back"])
async def test_a_claim_counts_with_the_room_results_in_flight_free(
    node: Node, monkeypatch: pytest.MonkeyPatch, results: str
) -> None:
    """Under a full limit, a claim of the node plans with the room that the node's result
    transaction in flight is freeing, and counts once that transaction has ended: after a
    commit the count finds the room (no rerun); after a rollback it does not, and the claim
    runs again and takes nothing — the limit holds either way."""
    await node.queues.update(SCOPE, "q", QueueSettings(concurrency_limit=2), actor=ACTOR)
    await submit(node, 6)
    first, second = sessions(2)
    assert len(await node.workers.claim(SCOPE, first, [Want("q", "t", 2)], limit=2)) == 2
    claims = node.workers._claims
    asked: list[int] = []
    planned = asyncio.Event()
    claim_one = claims._claim_one

    async def record(*args: Any, **kwargs: Any) -> list[Lease]:
        asked.append(args[5])  # take
        planned.set()
        return await claim_one(*args, **kwargs)

    monkeypatch.setattr(claims, "_claim_one", record)
    holding, release = asyncio.Event(), asyncio.Event()

    async def results_in_flight(tx: Tx) -> None:  # what a result batch does to the queue row
        await queue_store.queue_add_counts(tx, SCOPE, "q", active=-2, now=node.clock.now())
        holding.set()
        await release.wait()
        if results == "roll back":
            raise RuntimeError("the result batch failed")

    ended = claims.results_started({(SCOPE, "q"): 2})
    batch = asyncio.create_task(node.db.run(results_in_flight))
    await holding.wait()
    claim = asyncio.create_task(node.workers.claim(SCOPE, second, [Want("q", "t", 5)], limit=5))
    await asyncio.wait_for(planned.wait(), timeout=30)  # planned with the room being freed
    assert asked == [2]
    release.set()
    if results == "roll back":
        with pytest.raises(RuntimeError):
            await batch
    else:
        await batch
    claims.results_ended(ended)
    leases = await claim
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and q.active == 2
    if results == "commit":
        assert len(leases) == 2 and asked == [2]  # counted at once, not run again
    else:
        assert leases == [] and asked == [2]  # run again: no room, nothing asked


async def test_a_claim_plans_without_the_room_a_claim_of_its_node_is_taking(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On one node, a claim under a queue limit leaves the room that a claim of the same node
    in flight is about to count: it asks for the rest only, so its count (which waits for the
    first claim's queue row) finds the room there and the claim is not run again."""
    await node.queues.update(SCOPE, "q", QueueSettings(concurrency_limit=3), actor=ACTOR)
    await submit(node, 10)
    first, second = sessions(2)
    holding, release = asyncio.Event(), asyncio.Event()
    claims = node.workers._claims
    room = claims.room.claim()
    asked: list[int] = []
    claim_one = claims._claim_one

    async def record(*args: Any, **kwargs: Any) -> list[Lease]:
        asked.append(args[5])  # take
        return await claim_one(*args, **kwargs)

    monkeypatch.setattr(claims, "_claim_one", record)

    async def claim_and_hold(tx: Tx) -> int:
        request = ClaimRequest(first, (Want("q", "t", 2),), 2)
        leases = await claims._claim_for(tx, SCOPE, request, node.clock.now(), room)
        holding.set()
        await release.wait()
        return len(leases)

    a = asyncio.create_task(node.db.run(claim_and_hold))
    await holding.wait()
    assert room.taken == {(SCOPE, "q"): 2}
    b = asyncio.create_task(node.workers.claim(SCOPE, second, [Want("q", "t", 10)], limit=10))
    await wait_for_lock_waiters(node.db, 1)  # B's count waits for A's queue row
    release.set()
    assert await a == 2
    room.end()
    assert len(await b) == 1
    assert asked == [2, 1]  # B planned with the room A was taking, once
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and (q.active, q.pending) == (3, 7)


async def test_a_claim_for_several_connections_waits_for_no_result_once_it_has_counted(
    node: Node,
) -> None:
    """One claim transaction for two connections under a full limit, with a result of the node
    in flight that frees room: the first connection's claim counts into the queue's row, and
    the second must not then plan with, and wait for, that result — it needs the row the
    claim now holds, so both would stall until the wait's timeout and the claim would fail
    its count and run again, time after time."""
    await node.queues.update(SCOPE, "q", QueueSettings(concurrency_limit=2), actor=ACTOR)
    await submit(node, 6)
    first, second, third = sessions(3)
    assert len(await node.workers.claim(SCOPE, first, [Want("q", "t", 1)], limit=1)) == 1
    claims = node.workers._claims
    ended = claims.results_started({(SCOPE, "q"): 1})  # never ends while the claim runs
    try:
        requests = [
            ClaimRequest(second, (Want("q", "t", 1),), 1),
            ClaimRequest(third, (Want("q", "t", 1),), 1),
        ]
        got = await asyncio.wait_for(claims.claim_many(SCOPE, requests), timeout=30)
    finally:
        claims.results_ended(ended)
    assert [len(leases) for leases in got] == [1, 0]
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and q.active == 2


async def test_once_a_gate_close_commits_no_claim_or_start_succeeds(node: Node) -> None:
    gate = await node.gates.create(SCOPE)
    await submit(node, 4, gate_id=gate)
    reading, release = asyncio.Event(), asyncio.Event()

    async def claim_holding_the_gate(tx: Tx) -> dict[str, bool]:
        seen = await gate_store.gates_open(tx, [gate])
        reading.set()
        await release.wait()
        return seen

    claiming = asyncio.create_task(node.db.run(claim_holding_the_gate))
    await reading.wait()
    closing = asyncio.create_task(node.gates.set_open(SCOPE, gate, open_=False))
    await wait_for_lock_waiters(node.db, 1)  # the close waits for the claimer's shared lock
    release.set()
    assert await claiming == {gate: True}  # decided before the close committed
    await closing
    [leaseless] = await asyncio.gather(
        node.workers.claim(SCOPE, sessions(1)[0], [Want("q", "t", 10)], limit=10)
    )
    assert leaseless == []


async def test_a_start_racing_a_close_is_denied_after_the_close(node: Node) -> None:
    gate = await node.gates.create(SCOPE)
    await submit(node, 1, gate_id=gate)
    [lease] = await node.workers.claim(SCOPE, sessions(1)[0], [Want("q", "t", 1)], limit=1)
    await node.gates.set_open(SCOPE, gate, open_=False)
    assert await node.workers.start(lease.ref) is StartVerdict.DENIED_GATE


async def test_a_stale_holder_racing_the_new_holder_changes_nothing(node: Node) -> None:
    from datetime import timedelta

    await submit(node, 1)
    alice, bob = sessions(2)
    [old] = await node.workers.claim(SCOPE, alice, [Want("q", "t", 1)], limit=1)
    node.clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))  # type: ignore[attr-defined]
    await node.workers.expire_leases()
    [new] = await node.workers.claim(SCOPE, bob, [Want("q", "t", 1)], limit=1)
    results = await asyncio.gather(node.workers.start(old.ref), node.workers.start(new.ref))
    assert results == [StartVerdict.STALE, StartVerdict.STARTED]
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and (q.active, q.pending) == (1, 0)


async def test_concurrent_submits_into_one_queue_all_go_through(node: Node) -> None:
    await submit(node, 1)  # the queue row exists
    await asyncio.gather(*(submit(node, 1) for _ in range(24)))
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and q.pending == 25


async def test_cancel_racing_claims_keeps_the_counters_exact(node: Node) -> None:
    from orbit_server.pulse.service import TaskService  # noqa: F401 - documents the subject

    await submit(node, 40)
    ids = [t.id for t in (await node.tasks.list_tasks(SCOPE, limit=50))[0]]
    claims = [node.workers.claim(SCOPE, s, [Want("q", "t", 10)], limit=10) for s in sessions(3)]
    cancels = [node.tasks.cancel(SCOPE, i, reason=None, actor=ACTOR) for i in ids[:20]]
    await asyncio.gather(*claims, *cancels)
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    counts = await node.db.read(lambda tx: task_store.queue_state_counts(tx, SCOPE, "q"))
    assert q is not None
    assert q.pending == counts.get("pending", 0) + counts.get("scheduled", 0)
    assert q.active == counts.get("leased", 0) + counts.get("running", 0)


async def test_a_stale_and_a_new_holder_complete_at_once(node: Node) -> None:
    from datetime import timedelta

    from orbit_server.pulse.worker import Outcome

    await submit(node, 1)
    alice, bob = sessions(2)
    [old] = await node.workers.claim(SCOPE, alice, [Want("q", "t", 1)], limit=1)
    await node.workers.start(old.ref)
    node.clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))  # type: ignore[attr-defined]
    await node.workers.expire_leases()
    node.clock.advance(timedelta(minutes=5))  # type: ignore[attr-defined]
    await node.workers.promote_due()
    [new] = await node.workers.claim(SCOPE, bob, [Want("q", "t", 1)], limit=1)
    await node.workers.start(new.ref)
    results = await asyncio.gather(
        node.workers.complete(old.ref, "stale"), node.workers.complete(new.ref, "fresh")
    )
    assert results == [Outcome.STALE, Outcome.ACCEPTED]
    task = await node.tasks.get(SCOPE, new.task.id)
    assert (task.state, task.result) == ("succeeded", "fresh")
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and (q.active, q.pending) == (0, 0)


async def test_a_gate_close_waits_for_a_claim_in_flight_then_stops_its_starts(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = await node.gates.create(SCOPE)
    await submit(node, 3, gate_id=gate)
    read_gate, release = asyncio.Event(), asyncio.Event()
    real_gates_open = gate_store.gates_open

    async def gates_open_then_hold(tx: Tx, gate_ids: list[str]) -> dict[str, bool]:
        seen = await real_gates_open(tx, gate_ids)
        read_gate.set()
        await release.wait()  # the real claim pauses here, holding the gate's shared lock
        return seen

    monkeypatch.setattr(gate_store, "gates_open", gates_open_then_hold)
    claiming = asyncio.create_task(
        node.workers.claim(SCOPE, sessions(1)[0], [Want("q", "t", 3)], limit=3)
    )
    await read_gate.wait()
    closing = asyncio.create_task(node.gates.set_open(SCOPE, gate, open_=False))
    await wait_for_lock_waiters(node.db, 1)  # the close waits for the claim
    release.set()
    leases = await claiming
    monkeypatch.setattr(gate_store, "gates_open", real_gates_open)
    await closing
    assert len(leases) == 3  # decided before the close committed
    verdicts = [await node.workers.start(lease.ref) for lease in leases]
    assert set(verdicts) == {StartVerdict.DENIED_GATE}  # after it, nothing starts


async def test_a_deferred_admission_passes_over_a_key_held_then_admits_it(node: Node) -> None:
    """Step by step (decision 0012): key a's task is leased, and its result is in flight — it
    has given the permit back but not committed, and it found no next task to admit (the
    submit below had not committed when it looked). A large submit commits tasks of keys a, b
    and c and admits after its commit: b and c at once, passing over a's permit row while the
    result holds it, and a once the result has committed — so a's new task is not stranded."""
    node.tasks.admissions.defer_over = 0
    await submit(node, 1, concurrency_key="a")
    [lease] = await node.workers.claim(SCOPE, sessions(1)[0], [Want("q", "t", 1)], limit=1)
    holding, release = asyncio.Event(), asyncio.Event()

    async def result_in_flight(tx: Tx) -> None:
        await permit_store.key_permits_add_many(tx, SCOPE, "q", {"a": -1}, node.clock.now())
        holding.set()
        await release.wait()

    result = asyncio.create_task(node.db.run(result_in_flight))
    await holding.wait()
    specs = [TaskSpec(queue="q", type="t", concurrency_key=key) for key in ("a", "b", "c")]
    submitting = asyncio.create_task(node.tasks.submit_many(SCOPE, specs))
    await wait_for_lock_waiters(node.db, 1)  # its last pass waits for a's permit row
    ready = await node.db.read(
        lambda tx: ready_store.ready_of_keys(tx, SCOPE, "q", ["a", "b", "c"])
    )
    assert len(ready) == 2  # b and c, admitted before the wait
    release.set()
    await result
    done = await submitting
    ready = await node.db.read(
        lambda tx: ready_store.ready_of_keys(tx, SCOPE, "q", ["a", "b", "c"])
    )
    assert ready == {s.task.id for s in done}
    assert lease.task.concurrency_key == "a"
