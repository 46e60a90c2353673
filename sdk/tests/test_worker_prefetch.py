"""A worker holds up to ``prefetch`` tasks beyond its ``concurrency``, leased but not started,
while its handlers are quick: a slot that frees starts its next task at once. Starts never
exceed the free slots."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from test_worker_support import FakeConnection, FakeServer, delivery, keys, ref, running

from orbit_sdk.worker import TaskContext, Worker
from orbit_sdk.worker._registry import HandlerRegistry
from orbit_sdk.worker._runtime import PREFETCH_BELOW_S, Runtime


def make_worker(server: FakeServer, **kwargs: Any) -> Worker:
    return Worker(server.url, "test-key", worker_id="w-test", **kwargs)


async def warm_up(conn: FakeConnection, credits: int) -> None:
    """Run one quick task (``tsk_warm``) to its ack: the worker has seen a quick handler, and
    its credits add up to ``credits``."""
    await conn.send({"type": "tasks", "items": [delivery("tsk_warm")]})
    await conn.start_all()
    await conn.ack(await conn.expect("result"))
    await conn.credits(credits)


def test_small_workers_prefetch_by_default() -> None:
    assert Worker("http://orbit", "k", concurrency=8).prefetch == 8
    assert Worker("http://orbit", "k", concurrency=32).prefetch == 32
    assert Worker("http://orbit", "k", concurrency=33).prefetch == 0
    assert Worker("http://orbit", "k", concurrency=256, prefetch=4).prefetch == 4
    assert Worker("http://orbit", "k", concurrency=8, prefetch=0).prefetch == 0


async def test_the_worker_prefetches_once_its_handlers_proved_quick() -> None:
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=3, prefetch=5)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> None: ...

        async with running(worker):
            conn = await server.accept()
            hello = await conn.welcome()
            assert hello["capacity"] == 3  # nothing ran yet: no prefetch
            # One credit was used and is given back, and five more for the prefetch.
            await warm_up(conn, 1 + 5)
            await conn.close(1011)
            conn = await server.accept()
            assert (await conn.welcome())["capacity"] == 3 + 5


async def test_prefetch_stops_while_handlers_are_slow() -> None:
    registry, executor = HandlerRegistry(), ThreadPoolExecutor(1)
    runtime = Runtime(
        registry=registry,
        concurrency=2,
        executor=executor,
        logger=logging.getLogger("test"),
        prefetch=4,
    )
    assert runtime.prefetch_now() == 0
    runtime._ran_for(PREFETCH_BELOW_S / 10)
    assert runtime.prefetch_now() == 4
    for _ in range(20):
        runtime._ran_for(PREFETCH_BELOW_S * 3)
    assert runtime.prefetch_now() == 0
    for _ in range(20):
        runtime._ran_for(0.0)
    assert runtime.prefetch_now() == 4
    executor.shutdown()


async def test_prefetched_tasks_start_only_when_a_slot_frees() -> None:
    gates = {name: asyncio.Event() for name in ("tsk_a", "tsk_b", "tsk_c")}
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1, prefetch=2)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> str:
            if ctx.task_id in gates:
                await gates[ctx.task_id].wait()
            return ctx.task_id

        async with running(worker):
            conn = await server.accept()
            assert (await conn.welcome())["capacity"] == 1
            await warm_up(conn, 1 + 2)
            items = [delivery(name) for name in gates]
            await conn.send({"type": "tasks", "items": items})
            first = await conn.start_all()
            assert first["items"] == [ref("tsk_a")]  # one slot: one start
            gates["tsk_a"].set()
            result = await conn.expect("result")
            assert keys(result["items"]) == [("tsk_a", 1)]
            second = await conn.start_all()  # the slot freed: the next held task starts
            assert second["items"] == [ref("tsk_b")]
            await conn.credits(3 + 1)  # and one credit refills what the first task used
            await conn.ack(result)
            gates["tsk_b"].set()
            gates["tsk_c"].set()
            assert keys((await conn.expect("result"))["items"]) == [("tsk_b", 1)]
            third = await conn.start_all()
            assert third["items"] == [ref("tsk_c")]


async def test_a_stopping_worker_releases_its_prefetched_tasks() -> None:
    release = asyncio.Event()
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1, prefetch=2)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> None:
            if ctx.task_id != "tsk_warm":
                await release.wait()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await warm_up(conn, 1 + 2)
            items = [delivery(name) for name in ("tsk_a", "tsk_b", "tsk_c")]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            stopping = asyncio.create_task(worker.stop_async())
            released = await conn.expect("release")
            assert sorted(keys(released["items"])) == [("tsk_b", 1), ("tsk_c", 1)]
            answers = [{**item, "released": True} for item in released["items"]]
            await conn.send({"type": "released", "re": released["id"], "items": answers})
            release.set()
            result = await conn.expect("result")
            assert keys(result["items"]) == [("tsk_a", 1)]
            await conn.ack(result)
            await asyncio.wait_for(stopping, 10)
