"""Long polls across nodes: a task that settles through another node wakes this node's
waiters through ``notify_settled`` (one read for all of them), not only through their own
periodic re-read."""

from __future__ import annotations

import asyncio
import contextlib

from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.pulse.service import SETTLED
from orbit_server.runtime.node import Node
from orbit_server.store import Database
from orbit_server.store import tasks as task_store
from tests.conftest import SCOPE
from tests.service.test_worker import claim, submit


async def test_a_task_settled_elsewhere_wakes_the_waiters_here(
    node: Node, db: Database, settings: Settings, clock: FakeClock
) -> None:
    other = await build_node(settings, db=db, clock=clock)  # another node: its own watch
    node.watch.poll_s = 3600.0  # no periodic re-read: only notify_settled can wake the waiter
    done, waiting = await submit(node, 2)
    [lease] = [lease for lease in await claim(other, free=2) if lease.task.id == done]
    waiter = asyncio.create_task(node.tasks.wait(SCOPE, done, wait_ms=60_000))
    bystander = asyncio.create_task(node.tasks.wait(SCOPE, waiting, wait_ms=60_000))
    while sorted(node.watch.waited()) != sorted([done, waiting]):
        await asyncio.sleep(0)  # both waiters have read their task once and wait
    assert await node.tasks.notify_settled() == 0  # nothing settled yet
    await other.workers.start(lease.ref)
    await other.workers.complete(lease.ref, {"ok": True})  # through the other node
    assert not waiter.done()
    assert await node.tasks.notify_settled() == 1
    task = await asyncio.wait_for(waiter, 5)
    assert (task.state, task.result) == ("succeeded", {"ok": True})
    assert not bystander.done()  # a task still running keeps its waiter waiting
    bystander.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await bystander
    assert node.watch.waited() == [] and not node.watch.someone_waits.is_set()
    found = await node.db.read(
        lambda tx: task_store.tasks_in_states(tx, [done, waiting, "nope"], SETTLED)
    )
    assert found == [done]
