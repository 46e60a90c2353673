"""Unserved work counted for a page that must answer fast: each queue's types found by index
seeks, each counted up to a bound, with the rule of the exact grouping."""

from __future__ import annotations

from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from orbit_server.store import Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import sessions as sstore
from tests.conftest import SCOPE, make_key
from tests.store.builders import task

HANDLERS = [
    {"queue": "emails", "type": "send", "versions": []},  # any version
    {"queue": "reports", "type": "build", "versions": ["2"]},
]


async def test_unserved_counts_stop_past_the_bound_and_follow_the_claim_rule(
    node: Node, clock: FakeClock
) -> None:
    await make_key(node, SCOPE, Role.WORKER)
    rows = [
        *(task(clock, f"s{i}", handler_version="9") for i in range(3)),  # served: any version
        *(task(clock, f"n{i}", type="nobody", priority=i % 3) for i in range(7)),  # no handler
        task(clock, "b1", queue="reports", type="build"),  # no version: served
        task(clock, "b2", queue="reports", type="build", handler_version="2"),  # served
        # Incompatible: every handler of the type names its versions, not this one.
        *(task(clock, f"b{i}", queue="reports", type="build", handler_version="1") for i in (3, 4)),
        task(clock, "i1", queue="idle", type="x"),
    ]

    async def fill(tx: Tx) -> None:
        for row in rows:
            await ready_store.task_ready_insert(tx, row)
        session = sstore.NewSession("ses_1", SCOPE, "node-a", "w1", "key_1", 4, HANDLERS)
        await sstore.session_insert(tx, session, clock.now())

    await node.db.run(fill)
    views = node.worker_views
    queues = ["emails", "reports", "idle", "empty"]
    exact: dict[str, int] = {}
    for group in await views.unserved(SCOPE):
        exact[group.queue] = exact.get(group.queue, 0) + group.pending
    assert exact == {"emails": 7, "reports": 2, "idle": 1}
    assert await views.unserved_upto(SCOPE, queues, upto=100) == exact
    # Past the bound a type's count stops at bound + 1: "more than 5".
    assert await views.unserved_upto(SCOPE, queues, upto=5) == {**exact, "emails": 6}
