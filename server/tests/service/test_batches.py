"""Results of many attempts in one transaction (the node's group commit): the bulk path for
successes writes exactly what one success at a time writes."""

from __future__ import annotations

from collections import Counter

from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.states import Event
from orbit_server.pulse.worker import Outcome, Report, Want
from orbit_server.runtime.node import Node
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from tests.conftest import SCOPE
from tests.service.test_worker import ACTOR, ALICE


async def test_a_batch_of_successes_across_queues_and_keys_settles_everything(
    node: Node,
) -> None:
    keyed = TaskSpec(queue="a", type="t", concurrency_key="k")
    specs = [TaskSpec(queue="a", type="t"), keyed, TaskSpec(queue="b", type="t"), keyed]
    submitted = await node.tasks.submit_many(SCOPE, specs)
    waiting = submitted[3].task.id  # k's second task waits for k's permit
    leases = await node.workers.claim(
        SCOPE, ALICE, [Want("a", "t", 10), Want("b", "t", 10)], limit=10
    )
    assert waiting not in {lease.task.id for lease in leases} and len(leases) == 3
    await node.workers.start_many([lease.ref for lease in leases])
    outcomes = await node.workers.report_many(
        [Report(lease.ref, Event.COMPLETE, result={"i": n}) for n, lease in enumerate(leases)]
        + [Report(leases[0].ref, Event.COMPLETE, result="twice")]  # a resend in the same batch
    )
    assert outcomes == [Outcome.ACCEPTED] * 3 + [Outcome.ALREADY]
    for n, lease in enumerate(leases):
        task = await node.tasks.get(SCOPE, lease.task.id)
        assert (task.state, task.result, task.finished_at is not None) == (
            "succeeded",
            {"i": n},
            True,
        )
        [attempt] = await node.tasks.attempts(SCOPE, lease.task.id)
        assert (attempt.state, attempt.cause) == ("succeeded", "completed")
    for name, active in (("a", 0), ("b", 0)):
        queue = await node.db.read(lambda tx, name=name: queue_store.queue_get(tx, SCOPE, name))
        assert queue is not None and queue.active == active
    events = await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=10))
    assert Counter((e.state, e.seq) for e in events) == Counter({("succeeded", 1): 3})
    # k's permit came back, so its waiting task was admitted and can be claimed now.
    [next_lease] = await node.workers.claim(SCOPE, ALICE, [Want("a", "t", 10)], limit=10)
    assert next_lease.task.id == waiting


async def test_a_batch_of_starts_mixes_bulk_and_one_by_one_answers(node: Node) -> None:
    from orbit_server.pulse.worker import StartVerdict

    gate = await node.gates.create(SCOPE)
    open_gate = await node.gates.create(SCOPE)
    specs = [TaskSpec(queue="a", type="t", timeout_ms=60_000),
             TaskSpec(queue="a", type="t", timeout_ms=120_000),
             TaskSpec(queue="a", type="t", gate_id=gate),
             TaskSpec(queue="a", type="t", gate_id=open_gate)]  # fmt: skip
    await node.tasks.submit_many(SCOPE, specs)
    short, long_, gated, through = await node.workers.claim(
        SCOPE, ALICE, [Want("a", "t", 10)], limit=10
    )
    await node.gates.set_open(SCOPE, gate, open_=False)
    await node.tasks.cancel(SCOPE, long_.task.id, reason=None, actor=ACTOR)
    answers = await node.workers.start_many(
        [short.ref, long_.ref, gated.ref, short.ref, through.ref]
    )
    assert [a.verdict for a in answers] == [
        StartVerdict.STARTED,  # in bulk
        StartVerdict.STALE,  # cancelled before it started
        StartVerdict.DENIED_GATE,  # its gate closed
        StartVerdict.STARTED,  # asked twice: the same answer
        StartVerdict.STARTED,  # in bulk: its gate is open
    ]
    assert (await node.tasks.get(SCOPE, through.task.id)).state == "running"
    first, again = answers[0], answers[3]
    assert first.deadline_at is not None and first.expires_at is not None
    assert (again.expires_at, again.deadline_at) == (first.expires_at, first.deadline_at)
    task = await node.tasks.get(SCOPE, short.task.id)
    assert (task.state, task.attempts) == ("running", 1)
    [attempt] = await node.tasks.attempts(SCOPE, short.task.id)
    assert attempt.state == "running" and attempt.started_at is not None


async def test_one_transaction_claims_for_several_sessions(node: Node) -> None:
    from orbit_server.pulse.worker import ClaimRequest
    from tests.service.test_worker import BOB

    await node.tasks.submit_many(SCOPE, [TaskSpec(queue="a", type="t")] * 5)
    want = (Want("a", "t", 10),)
    alice, bob = await node.workers.claim_many(
        SCOPE, [ClaimRequest(ALICE, want, 2), ClaimRequest(BOB, want, 10)]
    )
    assert (len(alice), len(bob)) == (2, 3)
    assert {lease.ref.lease_token for lease in alice} != {lease.ref.lease_token for lease in bob}
    assert {lease.task.session_id for lease in bob} == {BOB.session_id}
    assert not {lease.task.id for lease in alice} & {lease.task.id for lease in bob}
