"""The worker-side service on every dialect: claim, start, renew, results, expiry, quotas,
exclusion, fairness, gates. Time is a fake clock; nothing sleeps."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from orbit_server.audit import Actor
from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.pulse.model import Queue, TaskSpec
from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.service import QueueSettings
from orbit_server.pulse.states import SideEffect
from orbit_server.pulse.worker import (
    LeaseRef,
    Outcome,
    RenewVerdict,
    Session,
    StartVerdict,
    Want,
)
from orbit_server.runtime.node import Node
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from tests.conftest import SCOPE

ALICE = Session("sess_a", "node-1", "worker-a")
BOB = Session("sess_b", "node-2", "worker-b")
ACTOR = Actor("test")


def spec(**fields: object) -> TaskSpec:
    return TaskSpec(**{"queue": "emails", "type": "send", **fields})  # type: ignore[arg-type]


async def submit(node: Node, count: int = 1, **fields: object) -> list[str]:
    done = await node.tasks.submit_many(SCOPE, [spec(**fields) for _ in range(count)])
    return [s.task.id for s in done]


async def claim(node: Node, session: Session = ALICE, free: int = 100, **want: object):  # type: ignore[no-untyped-def]
    w = Want(**{"queue": "emails", "type": "send", "free": free, **want})  # type: ignore[arg-type]
    return await node.workers.claim(SCOPE, session, [w], limit=free)


async def queue(node: Node) -> Queue:
    found = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "emails"))
    assert found is not None
    return found


async def events(node: Node) -> Counter[str]:
    found = await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=1000))
    return Counter(e.state for e in found)


async def test_claim_start_complete_with_counters_attempts_and_event(node: Node) -> None:
    [task_id] = await submit(node, params={"n": 1})
    [lease] = await claim(node)
    assert lease.task.id == task_id and lease.task.state == "leased" and lease.ref.attempt == 1
    assert (await queue(node)).active == 1 and (await queue(node)).pending == 0
    assert await claim(node) == []  # nothing else to claim
    assert await node.workers.start(lease.ref) is StartVerdict.STARTED
    assert await node.workers.complete(lease.ref, {"sent": True}) is Outcome.ACCEPTED
    done = await node.tasks.get(SCOPE, task_id)
    assert (done.state, done.result, done.attempts) == ("succeeded", {"sent": True}, 1)
    assert done.finished_at is not None
    q = await queue(node)
    assert (q.active, q.pending) == (0, 0)
    assert await events(node) == Counter({"succeeded": 1})
    [attempt] = await node.tasks.attempts(SCOPE, task_id)
    assert (attempt.number, attempt.state, attempt.worker_id) == (1, "succeeded", "worker-a")
    assert attempt.cause == "completed"
    assert attempt.started_at is not None and attempt.ended_at is not None
    # A resend of the same result is acknowledged and changes nothing.
    assert await node.workers.complete(lease.ref, {"sent": True}) is Outcome.ALREADY
    assert await events(node) == Counter({"succeeded": 1})


async def test_stale_holders_can_never_renew_complete_or_release(
    node: Node, clock: FakeClock
) -> None:
    [task_id] = await submit(node)
    [first] = await claim(node, ALICE)
    await node.workers.start(first.ref)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    assert await node.workers.expire_leases() == 1  # idempotent work: retried
    clock.advance(timedelta(minutes=5))
    assert await node.workers.promote_due() == 1
    [second] = await claim(node, BOB)
    assert second.ref.attempt == 2 and second.ref.lease_token != first.ref.lease_token
    await node.workers.start(second.ref)
    before = await queue(node)
    assert await node.workers.complete(first.ref, "late") is Outcome.STALE
    assert (
        await node.workers.fail(first.ref, {"code": "x", "message": "m"}, retryable=True)
        is Outcome.STALE
    )
    [renewal] = await node.workers.renew([first.ref])
    assert renewal.verdict is RenewVerdict.STALE
    assert await node.workers.release([first.ref]) == [False]
    forged = LeaseRef(task_id, second.ref.attempt, "lse_forged", second.ref.session_id)
    assert await node.workers.complete(forged, "forged") is Outcome.STALE
    assert await queue(node) == before  # counters unchanged by stale writes
    current = await node.tasks.get(SCOPE, task_id)
    assert current.state == "running" and current.lease_epoch == 2


async def test_a_batch_of_renewals_extends_only_the_leases_that_hold(
    node: Node, clock: FakeClock
) -> None:
    await submit(node, 3)
    leases = await claim(node, ALICE, free=3)
    for lease in leases[:2]:
        await node.workers.start(lease.ref)  # the third stays leased: it renews too
    forged = LeaseRef(leases[0].ref.task_id, leases[0].ref.attempt, "lse_forged", ALICE.session_id)
    clock.advance(1000)
    refs = [leases[0].ref, forged, leases[1].ref, leases[2].ref, leases[0].ref]
    renewals = await node.workers.renew(refs)
    ends = clock.now() + timedelta(milliseconds=node.settings.lease_ms)
    assert [r.verdict for r in renewals] == [
        RenewVerdict.RENEWED, RenewVerdict.STALE, RenewVerdict.RENEWED, RenewVerdict.RENEWED,
        RenewVerdict.RENEWED,
    ]  # fmt: skip
    assert [r.expires_at for r in renewals] == [ends, None, ends, ends, ends]
    for lease in leases:
        task = await node.tasks.get(SCOPE, lease.ref.task_id)
        assert task.lease_expires_at == ends  # written, not only answered


async def test_expired_leases_follow_the_side_effect_rules(node: Node, clock: FakeClock) -> None:
    [unstarted] = await submit(node, type="a")
    [idempotent] = await submit(
        node, type="b", retry={"max_attempts": 1} and RetryPolicy(max_attempts=1)
    )
    [unsafe] = await submit(node, type="c", side_effect=SideEffect.UNSAFE)
    wants = [Want("emails", t, 10) for t in ("a", "b", "c")]
    leases = {
        lease.task.type: lease for lease in await node.workers.claim(SCOPE, ALICE, wants, limit=10)
    }
    await node.workers.start(leases["b"].ref)
    await node.workers.start(leases["c"].ref)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    assert await node.workers.expire_leases() == 3
    states = {
        t: (await node.tasks.get(SCOPE, i))
        for t, i in (("a", unstarted), ("b", idempotent), ("c", unsafe))
    }
    assert states["a"].state == "pending" and states["a"].attempts == 0  # no attempt used
    assert states["b"].state == "failed"  # idempotent, attempts exhausted
    assert states["c"].state == "needs_review"  # unsafe: never rerun silently
    assert states["c"].error is not None and states["c"].error["code"] == "outcome_unknown"
    assert await events(node) == Counter({"failed": 1, "needs_review": 1})
    q = await queue(node)
    assert (q.active, q.pending) == (0, 1)
    assert await node.workers.complete(leases["c"].ref, "too late") is Outcome.STALE


async def test_failures_retry_with_backoff_then_fail(node: Node, clock: FakeClock) -> None:
    policy = RetryPolicy(max_attempts=2, initial_backoff_ms=1000, max_backoff_ms=1000)
    [task_id] = await submit(node, retry=policy)
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    error = {"code": "smtp_down", "message": "try later"}
    assert await node.workers.fail(lease.ref, error, retryable=True) is Outcome.ACCEPTED
    retrying = await node.tasks.get(SCOPE, task_id)
    assert retrying.state == "scheduled" and retrying.run_at > clock.now()
    assert await node.workers.promote_due() == 0  # backoff not over
    clock.advance(timedelta(seconds=1))
    assert await node.workers.promote_due() == 1
    [again] = await claim(node)
    await node.workers.start(again.ref)
    assert await node.workers.fail(again.ref, error, retryable=True) is Outcome.ACCEPTED
    failed = await node.tasks.get(SCOPE, task_id)
    assert (failed.state, failed.attempts, failed.error) == ("failed", 2, error)
    causes = [a.state for a in await node.tasks.attempts(SCOPE, task_id)]
    assert causes == ["failed", "failed"]


async def test_non_retryable_errors_fail_at_once(node: Node) -> None:
    [task_id] = await submit(node, retry=RetryPolicy(max_attempts=5))
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    await node.workers.fail(lease.ref, {"code": "bad_input", "message": "no"}, retryable=False)
    assert (await node.tasks.get(SCOPE, task_id)).state == "failed"


async def test_cancel_reaches_running_work_through_renewals(node: Node) -> None:
    [task_id] = await submit(node)
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    cancelled = await node.tasks.cancel(SCOPE, task_id, reason="stop", actor=ACTOR)
    assert cancelled.state == "running" and cancelled.cancel_requested
    [renewal] = await node.workers.renew([lease.ref])
    assert renewal.verdict is RenewVerdict.CANCEL_REQUESTED
    assert await node.workers.report_cancelled(lease.ref) is Outcome.ACCEPTED
    assert (await node.tasks.get(SCOPE, task_id)).state == "cancelled"
    assert (await queue(node)).active == 0


async def test_cancelling_leased_work_frees_its_permits_and_fences_the_holder(node: Node) -> None:
    [task_id] = await submit(node, concurrency_key="user-1")
    [lease] = await claim(node)
    await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    assert await node.workers.start(lease.ref) is StartVerdict.STALE
    q = await queue(node)
    assert (q.active, q.pending) == (0, 0)
    permit = await node.db.read(
        lambda tx: permit_store.key_permit_active(tx, SCOPE, "emails", "user-1")
    )
    assert permit == 0


async def test_release_returns_unstarted_work_without_an_attempt(node: Node) -> None:
    [task_id] = await submit(node)
    [lease] = await claim(node)
    assert await node.workers.release([lease.ref]) == [True]
    task = await node.tasks.get(SCOPE, task_id)
    assert (task.state, task.attempts) == ("pending", 0)
    [again] = await claim(node, BOB)
    assert again.ref.attempt == 2


async def test_the_queue_concurrency_limit_holds(node: Node) -> None:
    await node.queues.update(SCOPE, "emails", QueueSettings(concurrency_limit=2), actor=ACTOR)
    await submit(node, 5)
    first = await claim(node)
    assert len(first) == 2
    assert await claim(node, BOB) == []
    await node.workers.start(first[0].ref)
    await node.workers.complete(first[0].ref, None)
    assert len(await claim(node, BOB)) == 1


async def test_per_key_exclusion_allows_key_concurrency_running(node: Node) -> None:
    await submit(node, 3, concurrency_key="user-1")
    await submit(node, 1, concurrency_key="user-2")
    leases = await claim(node)
    assert sorted(lease.task.concurrency_key or "" for lease in leases) == ["user-1", "user-2"]
    await node.queues.update(SCOPE, "emails", QueueSettings(key_concurrency=2), actor=ACTOR)
    more = await claim(node)
    assert [lease.task.concurrency_key for lease in more] == ["user-1"]
    assert await claim(node) == []


async def test_fairness_rotates_between_keys(node: Node) -> None:
    await node.tasks.submit_many(SCOPE, [spec(fairness_key="A") for _ in range(10_000)])
    b_ids = set(await submit(node, 10, fairness_key="B"))
    claimed: set[str] = set()
    for _ in range(2):
        claimed |= {lease.task.id for lease in await claim(node, free=32)}
    assert b_ids <= claimed


async def one_at_a_time(nodes: list[Node], claims: int) -> str:
    """The fairness keys of ``claims`` claims of one task each, made in turn by ``nodes``,
    each task completed before the next claim (a worker at concurrency 1)."""
    order = ""
    for i in range(claims):
        node = nodes[i % len(nodes)]
        leases = await claim(node, free=1)
        if not leases:
            break
        [lease] = leases
        order += lease.task.fairness_key or "-"
        await node.workers.start(lease.ref)
        assert await node.workers.complete(lease.ref, None) is Outcome.ACCEPTED
    return order


@pytest.mark.parametrize("node_count", [1, 2])
async def test_one_task_claims_alternate_between_keys_across_nodes(
    node: Node, settings: Settings, clock: FakeClock, node_count: int
) -> None:
    """30 tasks of A submitted before 5 of B, then claims of one task each (a worker at
    concurrency 1), on one node or on two sharing the database: B starts second, and the keys
    alternate while both have work (SPEC P7)."""
    nodes = [node] + [
        await build_node(settings, db=node.db, clock=clock) for _ in range(1, node_count)
    ]
    await submit(node, 30, fairness_key="A")
    await submit(node, 5, fairness_key="B")
    order = await one_at_a_time(nodes, 35)
    assert order[:10] == "ABABABABAB", order
    assert order == "ABABABABAB" + "A" * 25


async def test_priority_comes_before_the_rotation(node: Node) -> None:
    """Keys take turns within a priority; a higher priority goes first whatever the key, and
    also under a key beyond those a small claim reads."""
    await submit(node, 3, fairness_key="A")
    await submit(node, 3, fairness_key="B")
    await submit(node, 2, fairness_key="C", priority=5)
    await submit(node, 1, fairness_key="D", priority=7)
    assert await one_at_a_time([node], 9) == "DCCABABAB"


async def test_a_claim_of_several_tasks_shares_and_moves_the_rotation(node: Node) -> None:
    await submit(node, 6, fairness_key="A")
    await submit(node, 6, fairness_key="B")
    await submit(node, 6, fairness_key="C")
    first = await claim(node, free=4)
    assert [lease.task.fairness_key for lease in first] == ["A", "B", "C", "A"]
    second = await claim(node, free=2)  # goes on after A, the last key served
    assert [lease.task.fairness_key for lease in second] == ["B", "C"]
    third = await claim(node, free=1)
    assert [lease.task.fairness_key for lease in third] == ["A"]


async def test_attempts_of_a_task_never_overlap_across_nodes(
    node: Node, settings: Settings, clock: FakeClock
) -> None:
    """Times are each node's clock at the start of its transaction. Node A, 5 ms ahead of
    node B, ends attempt 1 (its lease expired); B leases attempt 2 on its own clock, which
    would put that lease 5 ms before the end of the attempt it follows."""
    ahead = FakeClock(clock.now() + timedelta(milliseconds=5))
    node_a = await build_node(settings, db=node.db, clock=ahead)
    [task_id] = await submit(node)
    assert len(await claim(node)) == 1
    for c in (clock, ahead):
        c.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    assert await node_a.workers.expire_leases() == 1  # unstarted: back to pending
    [second] = await claim(node)
    assert second.ref.attempt == 2
    one, two = await node.tasks.attempts(SCOPE, task_id)
    assert one.ended_at is not None and two.leased_at >= one.ended_at
    assert one.ended_at == ahead.now()


async def test_a_fairness_key_met_outside_the_remembered_set_gets_its_share_next(
    node: Node,
) -> None:
    """A type's whole set of fairness keys is remembered between claims (for up to
    ``FAIRNESS_KEY_SET_S``); a claim that meets a task of a key outside it reads the set anew,
    so the next claim shares between the keys that have work now."""
    await submit(node, 3, fairness_key="a")
    await submit(node, 3, fairness_key="b")
    first = await claim(node, free=4)  # reads and remembers {a, b}
    assert sorted(lease.task.fairness_key or "" for lease in first) == ["a", "a", "b", "b"]
    await submit(node, 6, fairness_key="c")
    second = await claim(node, free=4)  # a and b have one left each; the rest comes from c
    assert sorted(lease.task.fairness_key or "" for lease in second) == ["a", "b", "c", "c"]
    await submit(node, 6, fairness_key="d")  # behind c in claim order
    third = await claim(node, free=4)
    assert sorted(lease.task.fairness_key or "" for lease in third) == ["c", "c", "d", "d"]


async def test_a_closed_gate_stops_claims_and_starts(node: Node) -> None:
    gate = await node.gates.create(SCOPE)
    await submit(node, 2, gate_id=gate)
    [lease, _] = await claim(node)
    await node.gates.set_open(SCOPE, gate, open_=False)
    assert await node.workers.start(lease.ref) is StartVerdict.DENIED_GATE
    assert await claim(node) == []
    await node.gates.set_open(SCOPE, gate, open_=True)
    [again] = await claim(node)  # the denied one is back in the claim range
    assert again.task.id == lease.task.id and again.ref.attempt == 2


async def test_handler_versions_and_paused_queues(node: Node) -> None:
    await submit(node, handler_version="2")
    assert await claim(node, versions=("1",)) == []
    await node.queues.update(SCOPE, "emails", QueueSettings(paused=True), actor=ACTOR)
    assert await claim(node, versions=("2",)) == []
    await node.queues.update(SCOPE, "emails", QueueSettings(paused=False), actor=ACTOR)
    assert len(await claim(node, versions=("2",))) == 1


async def test_session_leases_for_reconnects(node: Node) -> None:
    await submit(node, 2)
    leases = await claim(node)
    await node.workers.start(leases[0].ref)
    held = await node.workers.session_leases(ALICE.session_id)
    assert {(h.task_id, h.state) for h in held} == {
        (leases[0].task.id, "running"),
        (leases[1].task.id, "leased"),
    }
    assert await node.workers.session_leases("nobody") == []


async def test_concurrent_claims_never_lease_a_task_twice(node: Node) -> None:
    await submit(node, 60)
    sessions = [Session(f"s{i}", "n", f"w{i}") for i in range(4)]
    batches = await asyncio.gather(*(claim(node, s, free=20) for s in sessions))
    # A claimer may pass over a row another one holds without taking it (SKIP LOCKED): what
    # the concurrent round left is taken by the next claim.
    batches.append(await claim(node, sessions[0], free=60))
    ids = [lease.task.id for batch in batches for lease in batch]
    assert len(ids) == len(set(ids)) == 60
    assert (await queue(node)).active == 60


@pytest.mark.parametrize("count", [0])
async def test_claiming_nothing_is_cheap(node: Node, count: int) -> None:
    assert await node.workers.claim(SCOPE, ALICE, [], limit=10) == []
    assert await claim(node, free=count) == []


async def make_needs_review(node: Node, clock: FakeClock) -> str:
    [task_id] = await submit(node, side_effect=SideEffect.UNSAFE)
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    await node.workers.expire_leases()
    assert (await node.tasks.get(SCOPE, task_id)).state == "needs_review"
    return task_id


async def test_operators_resolve_needs_review(node: Node, clock: FakeClock) -> None:
    ok_id = await make_needs_review(node, clock)
    resolved = await node.tasks.resolve(
        SCOPE, ok_id, succeeded=True, result={"checked": "by hand"}, error=None, actor=ACTOR
    )
    assert (resolved.state, resolved.result) == ("succeeded", {"checked": "by hand"})
    bad_id = await make_needs_review(node, clock)
    error = {"code": "charged_twice", "message": "refunded", "retryable": False}
    failed = await node.tasks.resolve(
        SCOPE, bad_id, succeeded=False, result=None, error=error, actor=ACTOR
    )
    assert (failed.state, failed.error) == ("failed", error)
    assert await events(node) == Counter({"needs_review": 2, "succeeded": 1, "failed": 1})
    from orbit_server.errors import StateConflict

    with pytest.raises(StateConflict):
        await node.tasks.resolve(SCOPE, ok_id, succeeded=True, result=None, error=None, actor=ACTOR)


async def test_operator_retry_gives_a_new_attempt(node: Node, clock: FakeClock) -> None:
    task_id = await make_needs_review(node, clock)
    reopened = await node.tasks.retry(SCOPE, task_id, actor=ACTOR)
    assert reopened.state == "pending" and reopened.max_attempts >= reopened.attempts + 1
    assert reopened.error is None and reopened.finished_at is None
    [lease] = await claim(node)
    assert lease.task.id == task_id and lease.ref.attempt == 2
    from orbit_server.errors import StateConflict

    with pytest.raises(StateConflict):
        await node.tasks.retry(SCOPE, task_id, actor=ACTOR)  # leased: not retryable


async def test_result_events_are_consumed_exactly_once(node: Node) -> None:
    from orbit_server.pulse.events import EventConsumer
    from orbit_server.pulse.model import ResultEvent
    from orbit_server.store import Tx

    for _ in range(3):
        [task_id] = await submit(node)
        await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    consumer = EventConsumer(node.db, node.clock)
    seen: list[str] = []

    async def handle(tx: Tx, event: ResultEvent) -> None:
        seen.append(event.task_id)

    pending = await consumer.pending()
    assert len(pending) == 3
    assert await consumer.process(pending[0], handle) is True
    assert await consumer.process(pending[0], handle) is False  # a duplicate delivery
    assert await consumer.drain(handle) == 2
    assert sorted(seen) == sorted(e.task_id for e in pending)
    assert await consumer.pending() == []

    async def crash(tx: Tx, event: ResultEvent) -> None:
        raise RuntimeError("consumer crashed")

    [task_id] = await submit(node)
    await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    [event] = await consumer.pending()
    with pytest.raises(RuntimeError):
        await consumer.process(event, crash)
    assert [e.id for e in await consumer.pending()] == [event.id]  # not lost


async def test_retention_prunes_finished_history_within_a_budget(
    node: Node, clock: FakeClock
) -> None:
    from orbit_server.pulse.events import EventConsumer
    from orbit_server.pulse.model import Owner, ResultEvent
    from orbit_server.store import Tx

    old = await submit(node, 3, owner=Owner("workflow", "wf_1", "step"))
    for task_id in old:
        await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    clock.advance(timedelta(days=8))
    [recent] = await submit(node)
    await node.tasks.cancel(SCOPE, recent, reason=None, actor=ACTOR)
    [waiting] = await submit(node)
    retention_ms = 7 * 86_400_000
    # Events of owned tasks not yet processed by their owner keep the tasks.
    assert await node.tasks.prune_finished(retention_ms) == 0

    async def ignore(tx: Tx, event: ResultEvent) -> None:
        return None

    await EventConsumer(node.db, node.clock).drain(ignore)
    assert await node.tasks.prune_finished(retention_ms, budget=2) == 2
    assert await node.tasks.prune_finished(retention_ms, budget=2) == 1
    assert await node.tasks.prune_finished(retention_ms) == 0
    remaining = {t.id for t in (await node.tasks.list_tasks(SCOPE, limit=50))[0]}
    assert remaining == {recent, waiting}


async def test_every_result_event_survives_retries_and_repeats(node: Node) -> None:
    [task_id] = await submit(node)
    await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    await node.tasks.retry(SCOPE, task_id, actor=ACTOR)
    await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    found = await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=10))
    assert [(e.task_id, e.state, e.seq) for e in found] == [
        (task_id, "cancelled", 1),
        (task_id, "cancelled", 2),
    ]


async def test_history_of_plain_tasks_is_pruned_without_a_consumer(
    node: Node, clock: FakeClock
) -> None:
    [task_id] = await submit(node)
    await node.tasks.cancel(SCOPE, task_id, reason=None, actor=ACTOR)
    clock.advance(timedelta(days=8))
    assert await node.tasks.prune_finished(7 * 86_400_000) == 1
    assert await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=10)) == []


async def test_a_task_timeout_caps_its_lease_and_ends_the_attempt(
    node: Node, clock: FakeClock
) -> None:
    [task_id] = await submit(node, timeout_ms=2000, retry=RetryPolicy(max_attempts=2))
    [lease] = await claim(node)
    await node.workers.start(lease.ref)
    started = clock.now()
    clock.advance(1500)
    [renewal] = await node.workers.renew([lease.ref])
    assert renewal.expires_at == started + timedelta(milliseconds=2000)  # capped at the deadline
    clock.advance(600)
    assert await node.workers.expire_leases() == 1
    task = await node.tasks.get(SCOPE, task_id)
    assert task.state == "scheduled" and task.error is not None
    assert task.error["code"] == "timeout"
    [attempt] = await node.tasks.attempts(SCOPE, task_id)
    assert attempt.cause == "timeout" and attempt.error == task.error


async def test_cancel_requested_work_is_not_retried(node: Node, clock: FakeClock) -> None:
    [failing] = await submit(node, retry=RetryPolicy(max_attempts=5))
    [expiring] = await submit(node, retry=RetryPolicy(max_attempts=5))
    leases = {lease.task.id: lease for lease in await claim(node)}
    for lease in leases.values():
        await node.workers.start(lease.ref)
        await node.tasks.cancel(SCOPE, lease.task.id, reason="stop", actor=ACTOR)
    await node.workers.fail(leases[failing].ref, {"code": "x", "message": "m"}, retryable=True)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    await node.workers.expire_leases()
    for task_id in (failing, expiring):
        assert (await node.tasks.get(SCOPE, task_id)).state == "cancelled"
    assert (await queue(node)).active == 0 and (await queue(node)).pending == 0


async def test_expired_leases_cannot_start_renew_or_report(node: Node, clock: FakeClock) -> None:
    await submit(node, 2)
    first, second = await claim(node)
    await node.workers.start(second.ref)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))  # recovery has not run
    assert await node.workers.start(first.ref) is StartVerdict.STALE
    [renewal] = await node.workers.renew([second.ref])
    assert renewal.verdict is RenewVerdict.STALE
    assert await node.workers.complete(second.ref, "late") is Outcome.STALE
    assert await node.workers.release([first.ref]) == [False]


async def test_priority_counts_across_fairness_keys(node: Node) -> None:
    await submit(node, 3, fairness_key="a", priority=0)
    [urgent] = await submit(node, fairness_key="z", priority=100)
    [first, *_] = await claim(node, free=2)
    assert first.task.id == urgent


async def test_a_blocked_head_of_the_queue_does_not_hide_free_work(node: Node) -> None:
    await submit(node, 1, concurrency_key="hot")
    await claim(node, free=1)  # the hot key's permit is taken
    await submit(node, 100, concurrency_key="hot")
    free = await submit(node, 5)
    leases = await claim(node, free=5)
    assert sorted(lease.task.id for lease in leases) == sorted(free)


async def test_idempotency_keys_expire_before_their_tasks(node: Node, clock: FakeClock) -> None:
    [old] = await submit(node, idempotency_key="k")
    await node.tasks.cancel(SCOPE, old, reason=None, actor=ACTOR)
    clock.advance(timedelta(days=2))
    day = 86_400_000
    assert await node.tasks.prune_finished(7 * day, idempotency_ms=day) == 1  # the key only
    assert (await node.tasks.get(SCOPE, old)).idempotency_key is None
    [new] = await submit(node, idempotency_key="k")
    assert new != old  # the key makes a new task now; the old task is still there
    assert (await node.tasks.get(SCOPE, old)).state == "cancelled"


async def test_a_closed_gates_tasks_wait_outside_the_claim_range(
    node: Node, clock: FakeClock
) -> None:
    gate = await node.gates.create(SCOPE)
    await submit(node, 1, gate_id=gate)
    [held] = await claim(node, free=1)  # leased before the close
    await node.gates.set_open(SCOPE, gate, open_=False)
    gated = set(await submit(node, 300, gate_id=gate))  # submitted while closed
    free = set(await submit(node, 3))
    leases = await claim(node, free=3)
    assert {lease.task.id for lease in leases} == free  # the gated backlog blocks nothing
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    assert await node.workers.expire_leases() == 4  # all back to pending; the gated one waits
    again = await claim(node)
    assert {lease.task.id for lease in again} == free  # not the held gated task
    await node.gates.set_open(SCOPE, gate, open_=True)
    reopened = {lease.task.id for lease in await claim(node, free=400)}
    assert reopened == gated | {held.task.id}
    await node.gates.set_open(SCOPE, gate, open_=True)  # opening an open gate changes nothing


async def test_a_repeated_start_of_a_running_attempt_answers_started(node: Node) -> None:
    await submit(node, 2)
    first, second = await claim(node)
    answers = await node.workers.start_many([first.ref, second.ref])
    assert [a.verdict for a in answers] == [StartVerdict.STARTED] * 2
    assert all(a.expires_at is not None and a.deadline_at is not None for a in answers)
    [again] = await node.workers.start_many([first.ref])
    assert (again.verdict, again.expires_at) == (StartVerdict.STARTED, answers[0].expires_at)
    assert (await node.tasks.get(SCOPE, first.task.id)).attempts == 1  # still one attempt


async def test_a_failure_of_unsafe_work_goes_to_review_unless_vouched_safe(node: Node) -> None:
    crashed, vouched = await submit(node, 2, side_effect="unsafe")
    first, second = await claim(node)
    await node.workers.start_many([first.ref, second.ref])
    error = {"code": "RuntimeError", "message": "boom", "retryable": True}
    await node.workers.fail(first.ref, error, retryable=True)
    await node.workers.fail(second.ref, {**error, "safe_to_retry": True}, retryable=True)
    by_id = {first.task.id: "needs_review", second.task.id: "scheduled"}
    for task_id in (crashed, vouched):
        assert (await node.tasks.get(SCOPE, task_id)).state == by_id[task_id]


async def test_a_report_of_an_eager_attempt_not_yet_started_is_its_start_too(
    node: Node, clock: FakeClock
) -> None:
    """Decisions 0007, 0008: a leased idempotent task without a gate may already run on its
    worker; a result that comes before its start is recorded records both, in one
    transaction, and counts the attempt."""
    from orbit_server.pulse.states import Event
    from orbit_server.pulse.worker import Report

    [done, failing] = await submit(node, 2, retry=RetryPolicy(max_attempts=3))
    leases = {lease.task.id: lease for lease in await claim(node)}
    clock.advance(5)
    error = {"code": "Boom", "message": "boom", "retryable": True}
    outcomes = await node.workers.report_many(
        [
            Report(leases[done].ref, Event.COMPLETE, result={"n": 1}),
            Report(leases[failing].ref, None, error=error),
        ]
    )
    assert outcomes == [Outcome.ACCEPTED, Outcome.ACCEPTED]
    task = await node.tasks.get(SCOPE, done)
    assert (task.state, task.attempts, task.result) == ("succeeded", 1, {"n": 1})
    [attempt] = await node.tasks.attempts(SCOPE, done)
    assert attempt.state == "succeeded" and attempt.started_at == attempt.ended_at == clock.now()
    retried = await node.tasks.get(SCOPE, failing)
    assert (retried.state, retried.attempts) == ("scheduled", 1)  # the attempt counted
    events = await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=10))
    assert [(e.task_id, e.state, e.seq) for e in events] == [(done, "succeeded", 1)]
    again = await node.workers.report_many([Report(leases[done].ref, Event.COMPLETE)])
    assert again == [Outcome.ALREADY]  # a resend
    assert (await queue(node)).active == 0
    # The start that was on its way when the result won is refused, and changes nothing.
    assert await node.workers.start(leases[done].ref) is StartVerdict.STALE
    assert (await node.tasks.get(SCOPE, done)).attempts == 1


async def test_a_report_cannot_start_unsafe_or_gated_work(node: Node) -> None:
    """Their handlers wait for ``started``: a result before it is refused (fenced)."""
    from orbit_server.pulse.states import Event
    from orbit_server.pulse.worker import Report

    gate = await node.gates.create(SCOPE)
    [unsafe] = await submit(node, 1, side_effect="unsafe")
    [gated] = await submit(node, 1, gate_id=gate)
    leases = await claim(node)
    outcomes = await node.workers.report_many(
        [Report(lease.ref, Event.COMPLETE) for lease in leases]
    )
    assert outcomes == [Outcome.STALE, Outcome.STALE]
    for task_id in (unsafe, gated):
        assert (await node.tasks.get(SCOPE, task_id)).state == "leased"


async def test_many_results_in_one_transaction_get_an_outcome_each(node: Node) -> None:
    from orbit_server.pulse.states import Event
    from orbit_server.pulse.worker import Report

    await submit(node, 2)
    await submit(node, 1, side_effect="unsafe")  # its result is no start (decision 0008)
    a, b, c = await claim(node)
    await node.workers.start_many([a.ref, b.ref])  # c never started
    assert await node.workers.complete(b.ref, "early") is Outcome.ACCEPTED
    outcomes = await node.workers.report_many(
        [
            Report(a.ref, Event.COMPLETE, result={"ok": 1}),
            Report(b.ref, Event.COMPLETE, result="again"),  # a resend
            Report(c.ref, None, error={"code": "x", "message": "y"}),
        ]
    )
    assert outcomes == [Outcome.ACCEPTED, Outcome.ALREADY, Outcome.STALE]
    assert (await node.tasks.get(SCOPE, a.task.id)).result == {"ok": 1}
    assert (await node.tasks.get(SCOPE, b.task.id)).result == "early"
    assert (await queue(node)).active == 1  # c is still leased
