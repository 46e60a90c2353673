"""A real SDK worker against a served node, on every dialect: a handler's ``ctx.progress`` goes
out with the heartbeats and shows on ``GET /v1/tasks/{id}`` while the handler still runs."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from orbit_sdk import AsyncClient, TaskProgress
from orbit_sdk.worker import TaskContext, Worker
from orbit_server.api.wire_tasks import TaskProgress as WireProgress
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.governance.keys import Role
from orbit_server.pulse.leasing import Renew, Want
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.retry import RetryPolicy
from tests.conftest import SCOPE, make_key
from tests.gateway.conftest import Live, hello, recv, send
from tests.gateway.test_gateway import closed_with
from tests.service.weave_support import WORKER

QUEUE = "progress"
WAIT_S = 10


@pytest.fixture
def settings() -> Settings:
    # Heartbeats every 100 ms, so that a report reaches the server quickly.
    return Settings.load(environ={"ORBIT_HEARTBEAT_MS": "100"}, flags={})


@pytest.fixture
async def orbit(live: Live) -> AsyncIterator[tuple[AsyncClient, Worker]]:
    url = live.url.replace("ws://", "http://").removesuffix("/v1/worker")
    key = await make_key(live.node, SCOPE, Role.SUBMITTER, Role.WORKER, Role.OPERATOR)
    async with AsyncClient(url=url, api_key=key) as client:
        yield client, Worker(url, key, concurrency=4, worker_id="progress-test")


async def until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """The first truthy answer of ``check`` (a read of the server), asked again as soon as the
    previous answer came."""
    async with asyncio.timeout(WAIT_S):
        while not (found := await check()):
            await asyncio.sleep(0.01)
    assert found, what
    return found


async def test_progress_shows_on_the_task_while_its_handler_runs(
    orbit: tuple[AsyncClient, Worker],
) -> None:
    client, worker = orbit
    reported, release = threading.Event(), threading.Event()

    @worker.handler(queue=QUEUE, type="upload")
    def upload(ctx: TaskContext) -> dict[str, int]:  # sync: reports from a pool thread
        with pytest.raises(ValueError, match="at most 4096"):
            ctx.progress({"blob": "x" * 5000})
        ctx.progress({"done": 10, "total": 100})
        ctx.progress({"done": 40, "total": 100, "stage": "upload"})  # replaces the first
        reported.set()
        assert release.wait(WAIT_S)
        return {"done": 100}

    running = asyncio.create_task(worker.run_async())
    try:
        task = await client.submit(QUEUE, "upload", {"file": "a.bin"})
        assert await asyncio.to_thread(reported.wait, WAIT_S)

        async def progress() -> TaskProgress | None:
            return (await client.get_task(task.id)).progress

        shown = await until(progress, "the progress on the task")
        assert isinstance(shown, TaskProgress)
        assert (shown.attempt, shown.details) == (1, {"done": 40, "total": 100, "stage": "upload"})
        assert shown.reported_at is not None
        # The handler still runs (it waits for release); the task is running, or still
        # leased while its eager start waits to be recorded (decision 0008).
        assert (await client.get_task(task.id)).state in ("leased", "running")
        release.set()
        done = await client.wait_for_task(task.id, timeout=WAIT_S)
    finally:
        release.set()
        await worker.stop_async(grace_s=1)
        await running
    # Kept once the task has ended, on the task and on its attempt.
    assert done.state == "succeeded" and done.progress == shown
    [attempt] = await client.task_attempts(task.id)
    assert attempt.progress == TaskProgress(details=shown.details, reported_at=shown.reported_at)


async def test_a_progress_report_over_the_limit_is_a_protocol_error(live: Live) -> None:
    async with live.connect() as ws:
        await hello(ws)
        item = {"task_id": "t", "attempt": 1, "lease_token": "x", "progress": {"x": "y" * 4096}}
        await send(ws, {"type": "heartbeat", "id": 1, "items": [item]})
        error = await recv(ws)
        assert (error["type"], error["code"]) == ("error", "invalid_frame")
        assert "larger than 4096 bytes" in error["message"]
        assert await closed_with(ws) == 4400


async def test_only_a_lease_that_holds_records_its_progress(live: Live) -> None:
    node = live.node
    task = (await node.tasks.submit(SCOPE, TaskSpec(queue=QUEUE, type="t"))).task
    [lease] = await node.workers.claim(
        SCOPE, WORKER, [Want(queue=QUEUE, type="t", free=1)], limit=1
    )
    await node.workers.start(lease.ref)
    forged = dataclasses.replace(lease.ref, lease_token="lse_guessed")
    other = dataclasses.replace(lease.ref, session_id="ses_other")
    renewals = await node.workers.renew(
        [Renew(forged, '{"done": 99}'), Renew(other, '{"done": 98}'), lease.ref]
    )
    assert [r.verdict for r in renewals] == ["stale", "stale", "renewed"]
    [attempt] = await node.tasks.attempts(SCOPE, task.id)
    assert attempt.progress is None
    [renewal] = await node.workers.renew([Renew(lease.ref, '{"done": 1}')])
    assert renewal.verdict == "renewed"
    latest = await node.tasks.latest_attempt(await node.tasks.get(SCOPE, task.id))
    assert latest is not None and latest.progress == {"done": 1}
    assert latest.progress_at == node.clock.now()


async def test_a_retry_starts_without_the_previous_attempts_report(
    live: Live, clock: FakeClock
) -> None:
    node = live.node
    retry = RetryPolicy(max_attempts=2, initial_backoff_ms=1000, max_backoff_ms=1000)
    task = (await node.tasks.submit(SCOPE, TaskSpec(queue=QUEUE, type="t", retry=retry))).task
    want = [Want(queue=QUEUE, type="t", free=1)]
    [first] = await node.workers.claim(SCOPE, WORKER, want, limit=1)
    await node.workers.start(first.ref)
    await node.workers.renew([Renew(first.ref, '{"done": 3}')])
    await node.workers.fail(first.ref, {"code": "boom", "message": "again"}, retryable=True)

    async def progress() -> WireProgress | None:
        latest = await node.tasks.latest_attempt(await node.tasks.get(SCOPE, task.id))
        return None if latest is None else WireProgress.of(latest)

    waiting = await progress()  # the retry waits: the failed attempt's report, named as such
    assert waiting is not None and (waiting.attempt, waiting.details) == (1, {"done": 3})
    clock.advance(timedelta(seconds=1))
    assert await node.workers.promote_due() == 1
    [second] = await node.workers.claim(SCOPE, WORKER, want, limit=1)
    assert second.ref.attempt == 2
    assert await progress() is None  # the retry has reported nothing yet
    attempts = await node.tasks.attempts(SCOPE, task.id)
    assert [a.progress for a in attempts] == [{"done": 3}, None]
