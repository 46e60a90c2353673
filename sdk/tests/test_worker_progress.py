"""``ctx.progress``: checked where the handler calls it, the latest report sent once with the
next heartbeat, from sync and async handlers."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from test_worker_support import FakeServer, delivery, ref, running

from orbit_sdk.worker import TaskContext, Worker

TIMEOUT = 5.0


def context() -> TaskContext:
    return TaskContext(task_id="tsk_1", attempt=1, queue="q", type="t", deadline=datetime.now(UTC))


@pytest.mark.parametrize(
    ("details", "message"),
    [
        (["done", 1], "must be a JSON object"),
        ({1: "one"}, "string keys"),
        ({"when": object()}, "cannot be encoded as JSON"),
        ({"blob": "x" * 4096}, "at most 4096"),
    ],
)
def test_bad_progress_is_refused_at_the_call(details: Any, message: str) -> None:
    ctx = context()
    with pytest.raises(ValueError, match=message):
        ctx.progress(details)
    assert ctx._take_progress() is None


def test_only_the_latest_report_is_kept_as_it_was_reported() -> None:
    ctx = context()
    details: dict[str, Any] = {"done": 1, "items": [1]}
    ctx.progress({"done": 0})
    ctx.progress(details)
    details["items"].append(2)  # a later change of the caller's object is not reported
    assert ctx._take_progress() == {"done": 1, "items": [1]}
    assert ctx._take_progress() is None  # taken once


def test_reports_from_many_threads_leave_one_whole_report() -> None:
    ctx = context()
    threads = [
        threading.Thread(target=lambda n=n: [ctx.progress({"n": n, "i": i}) for i in range(200)])
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    last = ctx._take_progress()
    assert last is not None and last["i"] == 199 and last["n"] in range(4)


@pytest.mark.parametrize("sync", [True, False])
async def test_the_latest_report_goes_once_with_the_next_heartbeat(sync: bool) -> None:
    reported, release = threading.Event(), threading.Event()
    async with FakeServer() as server:
        worker = Worker(server.url, "test-key", worker_id="w-test", concurrency=1, prefetch=0)

        def report(ctx: TaskContext) -> None:
            ctx.progress({"done": 1})
            ctx.progress({"done": 2, "stage": "upload"})
            reported.set()

        if sync:

            @worker.handler(queue="q", type="t")
            def handle(ctx: TaskContext) -> str:
                report(ctx)
                assert release.wait(TIMEOUT)
                return "ok"

        else:

            @worker.handler(queue="q", type="t")
            async def handle_async(ctx: TaskContext) -> str:
                report(ctx)
                await asyncio.to_thread(release.wait, TIMEOUT)
                return "ok"

        async with running(worker):
            conn = await server.accept()
            await conn.welcome(heartbeat_ms=50)
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            assert await asyncio.to_thread(reported.wait, TIMEOUT)
            while True:  # heartbeats sent before the report carry none
                heartbeat = await conn.heartbeat_with(("tsk_1", 1))
                if heartbeat["items"] != [ref()]:
                    break
            assert heartbeat["items"] == [{**ref(), "progress": {"done": 2, "stage": "upload"}}]
            again = await conn.heartbeat_with(("tsk_1", 1))
            assert again["items"] == [ref()]  # nothing new to report: the reference alone
            release.set()
