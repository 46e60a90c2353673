"""The SDK's task and queue calls against the real server app, on every dialect: what the SDK
sends is what the server accepts, and what the server answers decodes into the SDK's types."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import httpx2
import pytest

import orbit_sdk
from orbit_sdk import AsyncClient, RetryPolicy, TaskError, TaskRequest
from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.pulse.worker import Session, Want
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, make_key, orbit_app

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
WORKER = Session("ses_compat", "node-compat", "worker-compat")
STATES = (
    "scheduled",
    "pending",
    "leased",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "needs_review",
)


async def client_for(node: Node, *roles: Role) -> AsyncClient:
    key = await make_key(node, SCOPE, *roles)
    transport = httpx2.ASGITransport(app=orbit_app(node))
    return AsyncClient("http://orbit.test", key, transport=transport)


@pytest.fixture
async def sdk(node: Node) -> AsyncIterator[AsyncClient]:
    async with await client_for(node, Role.SUBMITTER, Role.OPERATOR) as client:
        yield client


async def needs_review(node: Node, clock: FakeClock, sdk: AsyncClient, type_: str) -> str:
    """An unsafe task whose started lease expired: its outcome is unknown."""
    task = await sdk.submit("payments", type_, {"order": 1}, side_effect="unsafe")
    [lease] = await node.workers.claim(SCOPE, WORKER, [Want("payments", type_, free=1)], limit=1)
    await node.workers.start(lease.ref)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    await node.workers.expire_leases()
    return task.id


async def test_submit_sends_what_the_server_accepts_and_reads_what_it_answers(
    sdk: AsyncClient, node: Node, clock: FakeClock
) -> None:
    task = await sdk.submit(
        "emails",
        "send-welcome",
        {"user": 7},
        priority=5,
        delay_ms=60_000,
        idempotency_key="welcome-7",
        concurrency_key="user-7",
        fairness_key="shop-3",
        side_effect="unsafe",
        handler_version="v2",
        retry=RetryPolicy(max_attempts=5, initial_backoff_ms=500),
        timeout_ms=120_000,
        labels={"team": "growth"},
        traceparent=TRACEPARENT,
    )

    assert (task.queue, task.type, task.state, task.params) == (
        "emails",
        "send-welcome",
        "scheduled",
        {"user": 7},
    )
    assert (task.priority, task.side_effect, task.handler_version) == (5, "unsafe", "v2")
    assert (task.idempotency_key, task.concurrency_key, task.fairness_key) == (
        "welcome-7",
        "user-7",
        "shop-3",
    )
    assert task.retry == RetryPolicy(max_attempts=5, initial_backoff_ms=500)
    assert (task.max_attempts, task.timeout_ms, task.labels) == (5, 120_000, {"team": "growth"})
    assert task.created_at == clock.now() and task.created_at.tzinfo is not None
    assert task.run_at == task.created_at + timedelta(minutes=1)
    assert (task.attempts, task.finished_at, task.owner, task.error) == (0, None, None, None)
    assert await sdk.get_task(task.id) == task
    # The header reached the server, and is no part of the task object.
    assert (await node.tasks.get(SCOPE, task.id)).traceparent == TRACEPARENT


async def test_defaults_left_out_and_sent_are_the_same_request(
    sdk: AsyncClient, clock: FakeClock
) -> None:
    run_at = clock.now() + timedelta(days=1)  # 2030-01-02T00:00:00Z
    first = await sdk.submit("emails", "send", {"user": 42}, idempotency_key="k", run_at=run_at)

    again = await sdk.submit(
        "emails",
        "send",
        {"user": 42},
        idempotency_key="k",
        run_at="2030-01-02T08:00:00+08:00",
        priority=0,
        retry=RetryPolicy(max_attempts=3),
        side_effect="idempotent",
    )

    assert again == first
    assert first.run_at == run_at and first.state == "scheduled"
    with pytest.raises(orbit_sdk.IdempotencyConflictError) as conflict:
        await sdk.submit("emails", "send", {"user": 43}, idempotency_key="k")
    assert (conflict.value.status, conflict.value.code) == (409, "idempotency_conflict")
    assert conflict.value.request_id


async def test_submit_many_in_order_all_or_nothing(sdk: AsyncClient, clock: FakeClock) -> None:
    later = clock.now() + timedelta(hours=1)
    batch = [
        TaskRequest(queue="reports", type="build", params={"day": 1}, idempotency_key="r-1"),
        {"queue": "reports", "type": "build", "params": {"day": 2}, "run_at": later},
        TaskRequest(queue="reports", type="build", labels={"kind": "weekly"}, priority=3),
    ]

    tasks = await sdk.submit_many(batch, traceparent=TRACEPARENT)

    assert [t.params for t in tasks] == [{"day": 1}, {"day": 2}, {}]
    assert [t.state for t in tasks] == ["pending", "scheduled", "pending"]
    assert (tasks[1].run_at, tasks[2].labels, tasks[2].priority) == (later, {"kind": "weekly"}, 3)
    [replayed] = await sdk.submit_many([batch[0]])
    assert replayed.id == tasks[0].id

    with pytest.raises(orbit_sdk.ProtocolError) as invalid:
        await sdk.submit_many([batch[2], TaskRequest(queue="reports", type="build", timeout_ms=1)])
    assert invalid.value.message.startswith("invalid request: tasks[1].timeout_ms")
    assert len([t async for t in sdk.iter_tasks(queue="reports")]) == 3  # nothing created


async def test_lists_filter_and_iteration_follows_cursors(sdk: AsyncClient) -> None:
    growth = [
        (await sdk.submit("mail", "welcome", {"n": n}, labels={"team": "growth"})).id
        for n in range(3)
    ]
    others = [(await sdk.submit("sms", "reminder", {"n": n})).id for n in range(2)]
    await sdk.cancel_task(others[0])

    page = await sdk.list_tasks(queue="mail", limit=2)
    assert len(page.items) == 2 and page.next_cursor is not None
    rest = await sdk.list_tasks(queue="mail", limit=2, cursor=page.next_cursor)
    assert {t.id for t in page.items + rest.items} == set(growth)

    by_queue = [t.id async for t in sdk.iter_tasks(queue="mail", limit=2)]
    assert sorted(by_queue) == sorted(growth)
    # Sparse filters can answer short pages with a cursor; iteration goes on to the end.
    by_type = [t.id async for t in sdk.iter_tasks(type="reminder", limit=1)]
    assert sorted(by_type) == sorted(others)
    by_label = [t.id async for t in sdk.iter_tasks(label=("team", "growth"), limit=2)]
    assert sorted(by_label) == sorted(growth)
    assert [t.id async for t in sdk.iter_tasks(label="team:growth", type="reminder")] == []
    cancelled = await sdk.list_tasks(state="cancelled")
    assert [t.id for t in cancelled.items] == [others[0]] and cancelled.next_cursor is None
    everything = [t.id async for t in sdk.iter_tasks(limit=2)]
    assert sorted(everything) == sorted(growth + others)

    with pytest.raises(orbit_sdk.ProtocolError, match="unknown state"):
        await sdk.list_tasks(state="done")


async def test_cancel_then_retry(sdk: AsyncClient, node: Node) -> None:
    task = await sdk.submit("emails", "send")

    cancelled = await sdk.cancel_task(task.id, reason="user left")
    assert (cancelled.state, cancelled.cancel_reason) == ("cancelled", "user left")
    assert cancelled.finished_at is not None and cancelled.is_terminal
    assert await sdk.cancel_task(task.id) == cancelled  # a repeat changes nothing

    retried = await sdk.retry_task(task.id)
    assert (retried.state, retried.cancel_reason, retried.finished_at) == ("pending", None, None)
    with pytest.raises(orbit_sdk.StateConflictError) as twice:
        await sdk.retry_task(task.id)
    assert twice.value.status == 409

    async with await client_for(node, Role.SUBMITTER) as submitter:
        with pytest.raises(orbit_sdk.PermissionDeniedError):
            await submitter.retry_task(task.id)


async def test_attempts_and_resolving_needs_review(
    sdk: AsyncClient, node: Node, clock: FakeClock
) -> None:
    assert await sdk.task_attempts((await sdk.submit("payments", "noop")).id) == []
    charged = await needs_review(node, clock, sdk, "charge")

    waited = await sdk.wait_for_task(charged, timeout=5)
    assert waited.state == "needs_review" and waited.is_settled and not waited.is_terminal
    assert waited.error == TaskError(
        code="outcome_unknown",
        message="the worker's lease ended before it reported a result",
        retryable=False,
    )
    [attempt] = await sdk.task_attempts(charged)
    assert (attempt.number, attempt.state, attempt.cause) == (1, "needs_review", "lease_expired")
    assert (attempt.worker_id, attempt.session_id, attempt.node) == (
        "worker-compat",
        "ses_compat",
        "node-compat",
    )
    assert attempt.started_at is not None and attempt.ended_at is not None
    assert attempt.lease_expires_at is None
    assert attempt.error is not None and attempt.error.code == "outcome_unknown"

    with pytest.raises(orbit_sdk.ProtocolError, match="needs an error"):
        await sdk.resolve_task(charged, outcome="failed")
    resolved = await sdk.resolve_task(charged, outcome="succeeded", result={"charged": True})
    assert (resolved.state, resolved.result, resolved.finished_at) == (
        "succeeded",
        {"charged": True},
        clock.now(),
    )
    with pytest.raises(orbit_sdk.StateConflictError):
        await sdk.resolve_task(charged, outcome="succeeded")

    declined = await needs_review(node, clock, sdk, "charge-again")
    failed = await sdk.resolve_task(
        declined, outcome="failed", error=TaskError(code="card_declined", message="refused")
    )
    assert (failed.state, failed.result) == ("failed", None)
    assert failed.error == TaskError(code="card_declined", message="refused", retryable=False)


async def test_wait_for_task_times_out_or_wakes_on_a_change(sdk: AsyncClient) -> None:
    task = await sdk.submit("emails", "send")

    with pytest.raises(TimeoutError, match="still pending"):
        await sdk.wait_for_task(task.id, timeout=0.2, poll_ms=100)

    async def cancel_soon() -> None:
        await asyncio.sleep(0.1)
        await sdk.cancel_task(task.id)

    waited, _ = await asyncio.gather(sdk.wait_for_task(task.id, timeout=30), cancel_soon())
    assert waited.state == "cancelled"


async def test_queue_settings_and_counts(sdk: AsyncClient) -> None:
    created = await sdk.update_queue("thumbnails", concurrency_limit=10, max_pending=2)
    assert (created.name, created.concurrency_limit, created.max_pending) == ("thumbnails", 10, 2)
    assert (created.paused, created.key_concurrency, created.workers) == (False, 1, 0)
    await sdk.submit_many([TaskRequest(queue="thumbnails", type="resize")] * 2)

    with pytest.raises(orbit_sdk.QueueFullError) as full:
        await sdk.submit("thumbnails", "resize")
    assert (full.value.status, full.value.retry_after) == (429, 1.0)

    unlimited = await sdk.update_queue("thumbnails", max_pending=None)
    assert (unlimited.max_pending, unlimited.concurrency_limit) == (None, 10)  # the other is kept
    changed = await sdk.update_queue("thumbnails", paused=True, key_concurrency=3)
    assert (changed.paused, changed.key_concurrency, changed.concurrency_limit) == (True, 3, 10)
    cleared = await sdk.update_queue("thumbnails", concurrency_limit=None)
    assert (cleared.concurrency_limit, cleared.paused) == (None, True)
    assert await sdk.update_queue("thumbnails") == cleared
    await sdk.submit("emails", "send")

    queues = {queue.name: queue for queue in await sdk.list_queues()}
    assert sorted(queues) == ["emails", "thumbnails"]
    assert queues["thumbnails"].counts["pending"] == 2
    assert queues["thumbnails"].oldest_pending_age_ms is not None
    assert queues["emails"].counts == {**dict.fromkeys(STATES, 0), "pending": 1}

    with pytest.raises(orbit_sdk.ProtocolError):
        await sdk.update_queue("thumbnails", key_concurrency=0)


async def test_missing_tasks_are_typed_not_found(sdk: AsyncClient) -> None:
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: sdk.get_task("nope"),
        lambda: sdk.wait_for_task("nope", timeout=1),
        lambda: sdk.task_attempts("nope"),
        lambda: sdk.cancel_task("nope"),
        lambda: sdk.retry_task("nope"),
        lambda: sdk.resolve_task("nope", outcome="succeeded"),
    ]
    for call in calls:
        with pytest.raises(orbit_sdk.NotFoundError) as missing:
            await call()
        assert (missing.value.status, missing.value.code) == (404, "not_found")
