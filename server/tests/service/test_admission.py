"""Work that cannot run now never stands in front of work that can: a concurrency key admits
only as many of its tasks into the claim range as it has free permits (decision 0004), and
rows pinned to another handler version are filtered inside the claim's index scan."""

from __future__ import annotations

from datetime import timedelta

from orbit_server.clock import FakeClock
from orbit_server.pulse.service import QueueSettings
from orbit_server.pulse.states import Event
from orbit_server.pulse.worker import DEEP_SCAN, Outcome, Report, StartVerdict
from orbit_server.runtime.node import Node
from orbit_server.store import Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import permits as permit_store
from tests.conftest import SCOPE
from tests.service.test_worker import ACTOR, BOB, claim, submit


async def admitted(node: Node, key: str) -> set[str]:
    return await node.db.read(lambda tx: ready_store.ready_of_keys(tx, SCOPE, "emails", [key]))


async def test_a_busy_key_keeps_its_backlog_out_of_the_claim_range(node: Node) -> None:
    first = await submit(node, 1, concurrency_key="big")
    backlog = await submit(node, DEEP_SCAN + 500, concurrency_key="big")
    [other] = await submit(node, 1, concurrency_key="small")
    assert await admitted(node, "big") == {first[0]}  # one permit: one row, the first task
    [lease_big, lease_small] = await claim(node, free=2)
    assert {lease_big.task.id, lease_small.task.id} == {first[0], other}
    assert await admitted(node, "big") == set()  # its permit is taken: nothing waits in range
    [unkeyed] = await submit(node, 1)
    # The claim finds the new work at once, however many tasks of the busy key wait.
    assert [lease.task.id for lease in await claim(node, BOB)] == [unkeyed]
    await node.workers.start(lease_big.ref)
    await node.workers.complete(lease_big.ref, None)
    assert await admitted(node, "big") == {backlog[0]}  # the next one, in claim order
    [after] = await claim(node, BOB)
    assert after.task.id == backlog[0]


async def test_heads_of_many_keys_come_in_claim_order_with_their_own_limits(node: Node) -> None:
    """More keys than one statement reads: each key answers its own first tasks."""
    keys = [f"k{i:03}" for i in range(permit_store.HEADS_PER_STATEMENT + 30)]
    for key in keys:
        await submit(node, 3, concurrency_key=key)
    [urgent] = await submit(node, 1, concurrency_key="k000", priority=9)
    limits = {key: i % 3 for i, key in enumerate(keys)}  # 0, 1 or 2 tasks per key

    async def unit(tx: Tx) -> dict[str, list[str]]:
        return await permit_store.keys_head_pending(tx, SCOPE, "emails", limits)

    heads = await node.db.read(unit)
    assert {key: len(ids) for key, ids in heads.items()} == limits
    assert heads["k001"] and heads["k002"][0] != heads["k002"][1]
    tasks, _ = await node.tasks.list_tasks(SCOPE, queue="emails", limit=1000)
    listed = {t.id: t for t in tasks}
    for key, ids in heads.items():
        assert all(listed[i].concurrency_key == key for i in ids)
        assert ids == sorted(ids)  # claim order within a key: same priority and time, by id
    assert urgent not in heads["k000"]  # k000's limit is 0
    more = await node.db.read(
        lambda tx: permit_store.keys_head_pending(tx, SCOPE, "emails", {"k000": 1})
    )
    assert more == {"k000": [urgent]}  # the more urgent task heads its key


async def test_a_more_urgent_task_of_a_key_takes_the_admitted_place(node: Node) -> None:
    [low] = await submit(node, 1, concurrency_key="k", priority=0)
    [high] = await submit(node, 1, concurrency_key="k", priority=9)
    assert await admitted(node, "k") == {high}
    [lease] = await claim(node)
    assert lease.task.id == high
    await node.workers.start(lease.ref)
    await node.workers.fail(lease.ref, {"code": "boom", "message": "x"}, retryable=False)
    assert await admitted(node, "k") == {low}


async def test_cancelling_the_admitted_task_admits_the_next(node: Node) -> None:
    [first, second] = await submit(node, 2, concurrency_key="k")
    await node.tasks.cancel(SCOPE, first, reason=None, actor=ACTOR)
    assert await admitted(node, "k") == {second}


async def test_released_and_expired_unstarted_work_is_admitted_again(
    node: Node, clock: FakeClock
) -> None:
    [first, second] = await submit(node, 2, concurrency_key="k")
    [lease] = await claim(node)
    assert await node.workers.release([lease.ref]) == [True]
    assert await admitted(node, "k") == {first}  # back at the head of its key
    [lease] = await claim(node)
    clock.advance(timedelta(minutes=10))
    assert await node.workers.expire_leases() == 1
    assert await admitted(node, "k") == {first}
    assert second not in await admitted(node, "k")


async def test_a_retry_waits_outside_and_its_key_admits_the_next(
    node: Node, clock: FakeClock
) -> None:
    [first, second] = await submit(node, 2, concurrency_key="k")
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    await node.workers.fail(lease.ref, {"code": "boom", "message": "x"}, retryable=True)
    assert (await node.tasks.get(SCOPE, first)).state == "scheduled"
    assert await admitted(node, "k") == {second}
    clock.advance(timedelta(hours=1))
    assert await node.workers.promote_due() == 1
    # Due again, but its run time now comes after the other's: still one row for one permit.
    assert await admitted(node, "k") == {second}
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    await node.workers.complete(lease.ref, None)
    assert await admitted(node, "k") == {first}


async def test_raising_and_lowering_key_concurrency_readmits_waiting_keys(node: Node) -> None:
    await submit(node, 5, concurrency_key="a")
    await submit(node, 5, concurrency_key="b")
    await node.queues.update(SCOPE, "emails", QueueSettings(key_concurrency=3), actor=ACTOR)
    assert len(await admitted(node, "a")) == len(await admitted(node, "b")) == 3
    assert len(await claim(node)) == 6
    await node.queues.update(SCOPE, "emails", QueueSettings(key_concurrency=2), actor=ACTOR)
    assert await admitted(node, "a") == await admitted(node, "b") == set()
    assert await claim(node) == []


async def test_a_closed_gate_does_not_hold_up_the_rest_of_its_key(node: Node) -> None:
    gate = await node.gates.create(SCOPE)
    [gated] = await submit(node, 1, concurrency_key="k", gate_id=gate)
    [free] = await submit(node, 1, concurrency_key="k")
    assert await admitted(node, "k") == {gated}
    await node.gates.set_open(SCOPE, gate, open_=False)
    assert await admitted(node, "k") == {free}
    await node.gates.set_open(SCOPE, gate, open_=True)
    assert await admitted(node, "k") == {gated}  # first in claim order again
    [lease] = await claim(node)
    assert lease.task.id == gated
    assert await node.workers.start(lease.ref) is StartVerdict.STARTED


async def test_rows_pinned_to_another_version_do_not_fill_the_claim(node: Node) -> None:
    await submit(node, DEEP_SCAN + 500, handler_version="v1")
    [pinned] = await submit(node, 1, handler_version="v2")
    [any_version] = await submit(node, 1)
    leases = await claim(node, versions=("v2",))
    assert {lease.task.id for lease in leases} == {pinned, any_version}


async def test_permit_rows_of_idle_keys_are_pruned_and_come_back_when_needed(
    node: Node, clock: FakeClock
) -> None:
    await submit(node, 1, concurrency_key="old")
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    await node.workers.complete(lease.ref, None)
    clock.advance(timedelta(days=8))
    await node.tasks.prune_finished(7 * 86_400_000)

    async def permits(tx: Tx) -> int:
        return await permit_store.key_permit_active(tx, SCOPE, "emails", "old")

    async def exists(tx: Tx) -> bool:
        return await tx.fetch_one(
            "key_permit_get",
            {"tenant": SCOPE.tenant, "environment": SCOPE.environment, "queue": "emails",
             "concurrency_key": "old"},
        ) is not None  # fmt: skip

    assert not await node.db.read(exists)
    await submit(node, 2, concurrency_key="old")
    assert len(await claim(node)) == 1  # the recreated row still allows one at a time
    assert await node.db.read(permits) == 1


async def test_admission_reads_each_keys_permits_head_and_range_in_one_statement(
    node: Node,
) -> None:
    """``keys_admission`` after a result: free permits, the next pending task behind an open
    gate (or none), and the key's rows in the claim range."""
    gate = await node.gates.create(SCOPE)
    first = await submit(node, 1, concurrency_key="a")
    await submit(node, 1, concurrency_key="a", gate_id=gate, priority=5)  # behind a closed gate
    await node.gates.set_open(SCOPE, gate, open_=False)
    later = await submit(node, 1, concurrency_key="a")
    [solo] = await submit(node, 1, concurrency_key="b")

    async def read(keys: list[str]) -> dict[str, permit_store.KeyAdmission]:
        return await node.db.read(lambda tx: permit_store.keys_admission(tx, SCOPE, "emails", keys))

    states = await read(["a", "b", "none"])
    assert set(states) == {"a", "b"}  # a key without a permit row is left out
    assert states["a"] == permit_store.KeyAdmission(
        free=1, head=first[0], admitted=1, admitted_first=first[0]
    )
    assert states["b"] == permit_store.KeyAdmission(
        free=1, head=solo, admitted=1, admitted_first=solo
    )
    leases = await claim(node, free=10)
    assert {lease.task.id for lease in leases} == {first[0], solo}
    states = await read(["a", "b"])
    assert states["a"] == permit_store.KeyAdmission(
        free=0, head=later[0], admitted=0, admitted_first=None
    )  # the gated task of higher priority is passed over while its gate is closed
    assert states["b"] == permit_store.KeyAdmission(
        free=0, head=None, admitted=0, admitted_first=None
    )


async def test_results_of_one_batch_admit_each_keys_next_tasks(node: Node) -> None:
    """Results of tasks of several keys in one transaction: each key gets its permit back and
    admits its next tasks — the common way for a key with one free permit after it, the
    general way for a key with more (several heads to read)."""
    await node.queues.update(SCOPE, "emails", QueueSettings(key_concurrency=3), actor=ACTOR)
    many = await submit(node, 6, concurrency_key="many")
    one = await submit(node, 4, concurrency_key="one")
    leases = await claim(node, free=4)  # many: 3 (all its permits), one: 1 of 3
    assert sorted(lease.task.concurrency_key or "" for lease in leases) == [
        "many", "many", "many", "one",
    ]  # fmt: skip
    assert await admitted(node, "many") == set()
    assert await admitted(node, "one") == set(one[1:3])  # two permits still free
    finished = [lease for lease in leases if lease.task.concurrency_key == "many"][:1]
    finished += [lease for lease in leases if lease.task.concurrency_key == "one"]
    for lease in finished:
        assert await node.workers.start(lease.ref) == StartVerdict.STARTED
    reports = [Report(lease.ref, Event.COMPLETE, result=None) for lease in finished]
    assert await node.workers.report_many(reports) == [Outcome.ACCEPTED] * 2
    assert await admitted(node, "many") == {many[3]}  # one permit came back
    assert await admitted(node, "one") == set(one[1:4])  # all three free again
    permits = await node.db.run(
        lambda tx: permit_store.key_permits_lock(
            tx, SCOPE, "emails", ["many", "one"], node.clock.now()
        )
    )
    assert permits == {"many": 2, "one": 0}
