"""The SDK's schedule calls against the real server app, on every dialect: what the SDK sends
is what the server accepts, and what the server answers decodes into the SDK's types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx2
import pytest

from orbit_sdk import (
    AsyncClient,
    ConflictError,
    NotFoundError,
    RetryPolicy,
    ScheduleTask,
    StateConflictError,
)
from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, make_key, orbit_app

START = datetime(2030, 1, 1, tzinfo=UTC)  # the fake clock's start


@pytest.fixture
async def sdk(node: Node) -> AsyncIterator[AsyncClient]:
    key = await make_key(node, SCOPE, Role.OPERATOR)
    transport = httpx2.ASGITransport(app=orbit_app(node))
    async with AsyncClient("http://orbit.test", key, transport=transport) as client:
        yield client


async def test_every_schedule_call_round_trips(
    sdk: AsyncClient, node: Node, clock: FakeClock
) -> None:
    task = ScheduleTask(
        queue="reports", type="build", params={"kind": "daily"},
        retry=RetryPolicy(max_attempts=5), labels={"team": "data"},
    )  # fmt: skip
    created = await sdk.create_schedule(
        "nightly", task=task, cron="0 2 * * *", timezone="Asia/Shanghai", catchup="all",
        catchup_max=3, overlap="queue_one",
    )  # fmt: skip
    assert (created.version, created.catchup, created.overlap) == (1, "all", "queue_one")
    assert created.task.retry is not None and created.task.retry.max_attempts == 5
    assert created.next_fire_at == START + timedelta(hours=18)
    again = await sdk.create_schedule(
        "nightly", task=task, cron="0 2 * * *", timezone="Asia/Shanghai", catchup="all",
        catchup_max=3, overlap="queue_one",
    )  # fmt: skip
    assert again.id == created.id
    with pytest.raises(ConflictError):
        await sdk.create_schedule("nightly", task=task, cron="0 3 * * *")

    read = await sdk.get_schedule("nightly", preview=2)
    assert read.preview == [START + timedelta(hours=18), START + timedelta(hours=42)]
    changed = await sdk.update_schedule(
        "nightly", version=1, interval_ms=1000, overlap="allow", end_at=None
    )
    assert (changed.version, changed.cron, changed.interval_ms) == (2, None, 1000)
    with pytest.raises(StateConflictError):
        await sdk.update_schedule("nightly", version=1, overlap="skip")

    paused = await sdk.pause_schedule("nightly", reason="quiet hours")
    assert (paused.paused, paused.paused_reason) == (True, "quiet hours")
    fire = await sdk.trigger_schedule("nightly")
    assert (fire.cause, fire.outcome, fire.fire_time) == ("trigger", "fired", START)
    resumed = await sdk.resume_schedule("nightly")
    assert resumed.paused is False
    for _ in range(3):
        clock.advance(1000)
        await node.scheduler.run_due()
    fires = await sdk.schedule_fires("nightly", limit=2)
    assert [f.cause for f in fires.items] == ["schedule", "schedule"] and fires.next_cursor
    rest = await sdk.schedule_fires("nightly", cursor=fires.next_cursor)
    assert [f.cause for f in rest.items] == ["schedule", "trigger"]
    task_ = await sdk.get_task(fires.items[0].task_id or "")
    assert task_.owner is not None and task_.owner.kind == "schedule"

    backfill = await sdk.backfill_schedule("nightly", START, START + timedelta(seconds=3))
    assert (backfill.state, backfill.start, backfill.cursor) == ("running", START, None)
    while (await node.scheduler.run_backfills()).handled:
        pass
    done = await sdk.get_backfill("nightly", backfill.id)
    assert (done.state, done.fired, done.existing, done.failure) == ("done", 1, 2, None)
    assert (await sdk.get_schedule("nightly")).failure is None  # set while it cannot fire
    assert [b.id for b in await sdk.list_backfills("nightly")] == [backfill.id]

    page = await sdk.list_schedules(limit=10)
    assert [s.name for s in page.items] == ["nightly"] and page.next_cursor is None
    assert [s.name async for s in sdk.iter_schedules()] == ["nightly"]
    await sdk.delete_schedule("nightly")
    with pytest.raises(NotFoundError):
        await sdk.get_schedule("nightly")
