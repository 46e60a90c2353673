"""Eager starts wait briefly for their results (decision 0008): a result that comes within the
hold records the start with it in one transaction; a start the hold did not pair is recorded
alone, even if its worker is gone; nothing is answered before it is committed."""

from __future__ import annotations

import asyncio
from typing import Any

from orbit_server.runtime.node import Node
from tests.conftest import SCOPE
from tests.gateway.conftest import Live, hello, recv, ref, send
from tests.gateway.test_gateway import deliveries, submit


async def answers(ws: Any, count: int) -> dict[str, dict[str, Any]]:
    """The next ``count`` answers, by type."""
    found = {}
    for _ in range(count):
        frame = await recv(ws)
        found[frame["type"]] = frame
    return found


async def task_row(node: Node, task_id: str) -> tuple[str, int, bool]:
    task = await node.tasks.get(SCOPE, task_id)
    [attempt] = await node.tasks.attempts(SCOPE, task_id)
    return task.state, task.attempts, attempt.started_at is not None


async def test_a_result_within_the_hold_records_its_start_with_it(live: Live) -> None:
    [task_id] = await submit(live)
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        assert d["eager_start"] is True
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        await send(ws, {"type": "result", "id": 2,
                        "items": [{**ref(d), "outcome": "succeeded", "result": 7}]})  # fmt: skip
        got = await answers(ws, 2)
    assert got["acked"]["re"] == 2 and got["acked"]["items"][0]["verdict"] == "accepted"
    assert got["started"]["re"] == 1 and got["started"]["items"][0]["verdict"] == "started"
    assert live.gateway.coalescer.starts.batches == 0  # no transaction of its own
    assert await task_row(live.node, task_id) == ("succeeded", 1, True)


async def test_a_start_the_hold_did_not_pair_is_recorded_alone(live: Live) -> None:
    [task_id] = await submit(live)
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        started = await recv(ws)
        assert started["type"] == "started" and started["items"][0]["verdict"] == "started"
        assert await task_row(live.node, task_id) == ("running", 1, True)
        await send(ws, {"type": "result", "id": 2,
                        "items": [{**ref(d), "outcome": "succeeded"}]})  # fmt: skip
        assert (await recv(ws))["items"][0]["verdict"] == "accepted"
    assert live.gateway.coalescer.starts.batches == 1


async def test_a_held_start_is_recorded_after_its_worker_is_gone(live: Live) -> None:
    """A worker that dies while its handler runs still used an attempt: a task that kills its
    workers runs out of attempts instead of being delivered for ever."""
    [task_id] = await submit(live)
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
    async with asyncio.timeout(10):  # the hold ends on the node's own timer
        while (await live.node.tasks.get(SCOPE, task_id)).state == "leased":
            await asyncio.sleep(0.01)
    assert await task_row(live.node, task_id) == ("running", 1, True)


async def test_plain_starts_are_not_held(live: Live) -> None:
    [task_id] = await submit(live, side_effect="unsafe")
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        assert d["eager_start"] is False
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        assert (await recv(ws))["items"][0]["verdict"] == "started"
    assert live.gateway.coalescer.starts.batches == 1
    assert (await live.node.tasks.get(SCOPE, task_id)).state == "running"


async def test_a_task_submitted_to_an_idle_worker_is_leased_in_its_submit(live: Live) -> None:
    """Decision 0010 through the real dispatch: the worker's free credit is the slot."""
    from orbit_server.pulse.model import TaskSpec

    # Submitted before the worker connects: it creates the queue and is claimed as usual once
    # the worker says hello. (Submitted while the queue's dispatch loop was already looking,
    # it would also leave the loop a "work was submitted here" note, and the extra claim that
    # note causes holds the free credit for a moment at any time after the first delivery:
    # a submit in that moment finds no idle worker.)
    await submit(live)
    async with live.connect() as ws:
        await hello(ws, capacity=2)
        [first] = await deliveries(ws, 1)
        submitted = await live.node.tasks.submit(SCOPE, TaskSpec(queue="emails", type="send"))
        assert submitted.task.state == "leased"
        [second] = await deliveries(ws, 1)
        assert second["task_id"] == submitted.task.id and second["attempt"] == 1
        third = await live.node.tasks.submit(SCOPE, TaskSpec(queue="emails", type="send"))
        assert third.task.state == "pending"  # no credit left: it waits for a claim
        for n, d in enumerate((first, second), start=1):
            await send(ws, {"type": "start", "id": n, "items": [ref(d)]})
            await send(ws, {"type": "result", "id": 10 + n,
                            "items": [{**ref(d), "outcome": "succeeded"}]})  # fmt: skip
        await send(ws, {"type": "credit", "n": 2})
        [third_delivery] = await deliveries_among(ws, 1)
        assert third_delivery["task_id"] == third.task.id


async def deliveries_among(ws: Any, count: int) -> list[dict[str, Any]]:
    """The next ``count`` delivered tasks, skipping answers that come between."""
    found: list[dict[str, Any]] = []
    while len(found) < count:
        frame = await recv(ws)
        if frame["type"] == "tasks":
            found += frame["items"]
    return found
