"""The task counters of ``/metrics``, fed by the domain events of committed transitions, as a
real SDK worker runs tasks through a served node: every milestone is counted once, by queue."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from orbit_sdk import AsyncClient, RetryPolicy
from orbit_sdk.worker import NonRetryableError, TaskContext, Worker
from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.pulse.model import TaskSpec
from tests.conftest import SCOPE, make_key
from tests.gateway.conftest import Live, hello, recv

QUEUE = "metered"
ONE_RETRY = RetryPolicy(max_attempts=2, initial_backoff_ms=100, max_backoff_ms=100)


async def eventually(check: Callable[[], object], what: str, timeout: float = 10) -> None:
    async def poll() -> None:
        while not await check():  # type: ignore[misc]
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
async def client(live: Live) -> AsyncIterator[tuple[AsyncClient, str, str]]:
    url = live.url.replace("ws://", "http://").removesuffix("/v1/worker")
    key = await make_key(live.node, SCOPE, Role.SUBMITTER, Role.WORKER)
    async with AsyncClient(url=url, api_key=key) as orbit:
        yield orbit, url, key


async def test_each_milestone_is_counted_once_by_queue(
    live: Live, client: tuple[AsyncClient, str, str], clock: FakeClock
) -> None:
    orbit, url, key = client
    node = live.node
    held = threading.Event()
    worker = Worker(url, key, concurrency=8, worker_id="metered")

    @worker.handler(queue=QUEUE, type="ok")
    def ok(ctx: TaskContext) -> dict[str, int]:
        return {"attempt": ctx.attempt}

    @worker.handler(queue=QUEUE, type="bad")
    def bad(ctx: TaskContext) -> None:
        raise NonRetryableError("refused")

    @worker.handler(queue=QUEUE, type="flaky")
    def flaky(ctx: TaskContext) -> dict[str, int]:
        if ctx.attempt == 1:
            raise RuntimeError("try again")
        return {"attempt": ctx.attempt}

    @worker.handler(queue=QUEUE, type="hold")
    def hold(ctx: TaskContext) -> None:
        held.wait(10)

    running = asyncio.create_task(worker.run_async())
    try:
        done = [await orbit.submit(QUEUE, t) for t in ("ok", "bad")]
        retried = await orbit.submit(QUEUE, "flaky", retry=ONE_RETRY)
        lost = await orbit.submit(QUEUE, "hold", retry=ONE_RETRY)
        unknown = await orbit.submit(QUEUE, "hold", side_effect="unsafe")
        for task in done:
            assert (await orbit.wait_for_task(task.id, timeout=10)).state in ("succeeded", "failed")

        async def state_of(task_id: str, *states: str) -> bool:
            return (await orbit.get_task(task_id)).state in states

        await eventually(lambda: state_of(retried.id, "scheduled"), "the flaky task's retry")
        for task in (lost, unknown):
            await eventually(lambda t=task: state_of(t.id, "running"), "the held tasks to run")
        clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
        assert await node.workers.expire_leases() == 2
        assert await node.workers.promote_due() >= 1  # the flaky task's second attempt
        assert (await orbit.wait_for_task(retried.id, timeout=10)).state == "succeeded"
        assert (await orbit.get_task(lost.id)).state == "scheduled"
        assert (await orbit.get_task(unknown.id)).state == "needs_review"
    finally:
        held.set()
        await worker.stop_async(grace_s=1)
        await running

    def count(event: str) -> float | None:
        return node.metrics.registry.get_sample_value(
            "orbit_queue_task_events_total", {"queue": QUEUE, "event": event}
        )

    assert {
        event: count(event)
        for event in ("submitted", "started", "succeeded", "failed", "retried", "expired",
                      "needs_review", "cancelled")
    } == {
        "submitted": 5, "started": 6, "succeeded": 2, "failed": 1, "retried": 2, "expired": 2,
        "needs_review": 1, "cancelled": None,
    }  # fmt: skip
    metrics = node.metrics.render().decode()
    assert 'orbit_queue_task_events_total{event="started",queue="metered"} 6.0' in metrics


async def test_worker_slots_come_from_the_lease_ledger(live: Live) -> None:
    def value(name: str) -> float | None:
        return live.node.metrics.registry.get_sample_value(name)

    assert (value("orbit_worker_slots_free"), value("orbit_worker_slots_in_flight")) == (0, 0)
    async with live.connect() as ws:
        await hello(ws, capacity=5)
        assert value("orbit_worker_slots_free") == 5
        spec = TaskSpec(queue="emails", type="send")
        await live.node.tasks.submit_many(SCOPE, [spec, spec])
        delivered = 0
        while delivered < 2:
            frame = await recv(ws)
            assert frame["type"] == "tasks", frame
            delivered += len(frame["items"])
        # The claim reserved all 5 free slots and gives back the 3 it did not fill once its
        # transaction is done, which may come after the delivery under load.
        for _ in range(500):
            if value("orbit_worker_slots_in_flight") == 2:
                break
            await asyncio.sleep(0.01)
        assert (value("orbit_worker_slots_free"), value("orbit_worker_slots_in_flight")) == (3, 2)
