"""The claim and scan queries are served by their indexes (DATABASE.md: a server-side sort lets
a second SKIP LOCKED claimer see no rows while many are free)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.worker import Session, Want
from orbit_server.runtime.node import Node
from orbit_server.store import Tx, open_database
from orbit_server.store.migrate import migrate
from tests.conftest import DIALECTS, SCOPE
from tests.support.databases import MySQLServerForTests

# query name → the index that must serve it, with its parameters
PLANS: dict[str, tuple[str, dict[str, Any]]] = {
    "ready_candidates": (
        "task_ready_claim",
        {"queue": "emails", "type": "send", "limit": 50, "any_version": 0, "versions": ["v1"]},
    ),
    "ready_candidates_of_key": (
        "task_ready_fair",
        {
            "queue": "emails",
            "type": "send",
            "limit": 50,
            "fairness_key": "k1",
            "any_version": 1,
            "versions": [""],
        },
    ),
    "key_head_pending": ("tasks_key", {"queue": "emails", "concurrency_key": "c1", "limit": 2}),
    "leases_expired": ("tasks_lease", {"limit": 50}),
    "scheduled_due": ("tasks_due", {"limit": 50}),
    # The finder indexes of migration 0004 (decision 0006), keyed on columns that are NULL
    # outside the states they find.
    "session_leases": ("tasks_session", {"session_id": "ses_1"}),
    "gate_pending_keys": ("tasks_gate", {"gate_id": "gate_1"}),
    "queue_pending_keys": ("tasks_key", {"queue": "emails"}),
    "tasks_finished_before": ("tasks_finished", {"limit": 50, "before": "now"}),
    # Lists, newest first (all seeded tasks are of one queue, so a broader index in id order
    # serves as well): the ORDER BY names only the index's columns after the equal ones
    # (naming those too made MariaDB sort every matching row).
    "task_list": ("tasks_scope", {"limit": 50}),
    "task_list_by_state": ("tasks_state", {"state": "pending", "limit": 50}),
    "task_list_by_queue": ("tasks_queue|tasks_scope", {"queue": "emails", "limit": 50}),
    "task_list_by_queue_state": (
        "tasks_queue_state|tasks_state|tasks_scope",
        {"queue": "emails", "state": "pending", "limit": 50},
    ),
}


async def explain(tx: Tx, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    conn = tx._conn  # type: ignore[attr-defined]
    async with conn.cursor() as cursor:
        await cursor.execute("EXPLAIN " + sql, args)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in await cursor.fetchall()]


@pytest.mark.parametrize("query", sorted(PLANS))
async def test_claim_and_scan_queries_use_their_index_without_sorting(
    node: Node, clock: FakeClock, query: str
) -> None:
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's; SQLite has one writer and no SKIP LOCKED")
    specs = [
        TaskSpec(
            queue="emails",
            type="send",
            fairness_key=f"k{i % 5}",
            priority=i % 3,
            concurrency_key=f"c{i % 7}",
            handler_version=f"v{i % 2}",
        )
        for i in range(300)
    ]
    await node.tasks.submit_many(SCOPE, specs)
    await node.tasks.submit_many(SCOPE, [TaskSpec(queue="emails", type="send", delay_ms=1000)] * 50)
    index, params = PLANS[query]
    values = {
        "tenant": SCOPE.tenant,
        "environment": SCOPE.environment,
        "before": "~",
        "now": clock.now() + timedelta(seconds=10),
        **params,
    }
    if values["before"] == "now":
        values["before"] = values["now"]
    await assert_served_in_order(node, query, values, index)


async def assert_served_in_order(
    node: Node, query: str, values: dict[str, Any], index: str
) -> None:
    """The query's first table is read through ``index`` (or one of ``a|b``), with no sort."""
    sql, args = node.db.queries.bind(query, values)

    async def unit(tx: Tx) -> list[dict[str, Any]]:
        return await explain(tx, sql, tuple(args))

    plan = await node.db.run(unit)
    first = plan[0]
    # "index|other" is access through index with a rowid filter built from the other one
    assert str(first["key"]).split("|")[0] in index.split("|"), [
        (p["key"], p.get("Extra")) for p in plan
    ]
    assert "filesort" not in str(first.get("Extra") or "").lower(), plan


UNIONS: dict[str, tuple[str, str, list[dict[str, Any]]]] = {
    # query → (table alias, index, each part's parameters)
    "key_head_pending": (
        "t", "tasks_key", [{"concurrency_key": f"c{i}", "limit": 2} for i in range(3)]
    ),
    "ready_candidates_of_key": (
        "task_ready", "task_ready_fair",
        [{"type": "send", "fairness_key": f"k{i}", "limit": 4, "any_version": 1,
          "versions": [""]} for i in range(3)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("query", sorted(UNIONS))
async def test_a_union_of_per_key_reads_uses_the_index_in_every_part(
    node: Node, query: str
) -> None:
    """``keys_head_pending`` and the fair claim run one query once per key in a UNION ALL:
    every part reads its index in order (no sort), as the single query does."""
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's")
    specs = [
        TaskSpec(queue="emails", type="send", concurrency_key=f"c{i % 7}", fairness_key=f"k{i % 5}")
        for i in range(300)
    ]
    await node.tasks.submit_many(SCOPE, specs)
    table, index, parts = UNIONS[query]
    base = {"tenant": SCOPE.tenant, "environment": SCOPE.environment, "queue": "emails"}
    sql, args = node.db.queries[query].bind_union([{**base, **part} for part in parts])

    async def unit(tx: Tx) -> list[dict[str, Any]]:
        return await explain(tx, sql, tuple(args))

    plan = await node.db.run(unit)
    reads = [p for p in plan if p["table"] == table]
    assert len(reads) == len(parts), plan
    for part in reads:
        assert part["key"] == index, plan
        assert "filesort" not in str(part.get("Extra") or "").lower(), plan


async def test_the_claim_outlook_seeks_the_fairness_index_for_every_type(node: Node) -> None:
    """``claim_outlook`` reads, for each type, its first and last fairness key: two index
    seeks a type (no scan, no sort), whatever the number of ready rows."""
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's")
    specs = [
        TaskSpec(queue="emails", type=f"t{i % 3}", fairness_key=f"k{i % 5}") for i in range(300)
    ]
    await node.tasks.submit_many(SCOPE, specs)
    base = {"tenant": SCOPE.tenant, "environment": SCOPE.environment, "queue": "emails"}
    parts = [{**base, "type": f"t{i}"} for i in range(3)]
    sql, args = node.db.queries["claim_outlook"].bind_union(parts)

    async def unit(tx: Tx) -> list[dict[str, Any]]:
        return await explain(tx, sql, tuple(args))

    plan = await node.db.run(unit)
    reads = [p for p in plan if p["table"] == "task_ready"]
    assert len(reads) == 2 * len(parts), plan
    for part in reads:
        assert part["key"] == "task_ready_fair", plan
        assert "filesort" not in str(part.get("Extra") or "").lower(), plan


async def plan_for_keys(node: Node, query: str) -> list[dict[str, Any]]:
    """The plan of a per-key admission query over two of seven keys with pending tasks."""
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's")
    specs = [TaskSpec(queue="emails", type="send", concurrency_key=f"c{i % 7}") for i in range(300)]
    await node.tasks.submit_many(SCOPE, specs)
    values = {"tenant": SCOPE.tenant, "environment": SCOPE.environment, "queue": "emails"}
    sql, args = node.db.queries.bind(query, {**values, "keys": ["c1", "c2"]})

    async def unit(tx: Tx) -> list[dict[str, Any]]:
        return await explain(tx, sql, tuple(args))

    return await node.db.run(unit)


async def test_the_first_pending_task_of_many_keys_is_one_seek_per_key(node: Node) -> None:
    """``keys_first_pending``: the permit rows drive a dependent subquery that reads the key's
    index in claim order (no sort), one seek per key."""
    plan = await plan_for_keys(node, "keys_first_pending")
    [seek] = [p for p in plan if p["table"] == "t"]
    assert "DEPENDENT" in str(seek["select_type"]) and seek["key"] == "tasks_key", plan
    assert "filesort" not in str(seek.get("Extra") or "").lower(), plan


async def test_admission_after_results_reads_each_key_by_seeks(node: Node) -> None:
    """``keys_admission``: the permit rows drive dependent subqueries — the key's next task
    from ``tasks_key`` in claim order (no sort, no table row: the gate is in the index) and
    its rows in the claim range from ``task_ready_key``."""
    plan = await plan_for_keys(node, "keys_admission")
    [head] = [p for p in plan if p["table"] == "t"]
    assert "DEPENDENT" in str(head["select_type"]) and head["key"] == "tasks_key", plan
    assert "filesort" not in str(head.get("Extra") or "").lower(), plan
    assert "using index" in str(head.get("Extra") or "").lower(), plan  # covered
    ranges = [p for p in plan if p["table"] == "r"]
    assert len(ranges) == 2 and all(p["key"] == "task_ready_key" for p in ranges), plan


@pytest.mark.parametrize(
    "query", ["ready_delete_many", "key_permits_lock", "key_permits_lock_free", "tasks_lock_many"]
)
async def test_locking_statements_over_a_list_go_through_the_primary_key(
    node: Node, query: str
) -> None:
    """Even when the list names most of a small table, so that a scan would look cheaper: a
    locking statement that scans waits for every row other transactions hold (READ COMMITTED
    lets only UPDATE pass over locked rows that do not match)."""
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's")
    specs = [TaskSpec(queue="emails", type="send", concurrency_key=f"c{i}") for i in range(8)]
    done = await node.tasks.submit_many(SCOPE, specs)  # eight keys, each with its task admitted
    values = {"tenant": SCOPE.tenant, "environment": SCOPE.environment, "queue": "emails"}
    names = {
        "ready_delete_many": {"task_ids_json": json.dumps([s.task.id for s in done][:7])},
        "key_permits_lock": {"keys": [f"c{i}" for i in range(7)]},
        "key_permits_lock_free": {"keys": [f"c{i}" for i in range(7)]},
        "tasks_lock_many": {"task_ids": [s.task.id for s in done][:7]},
    }
    sql, args = node.db.queries.bind(query, {**values, **names[query]})

    async def unit(tx: Tx) -> list[dict[str, Any]]:
        return await explain(tx, sql, tuple(args))

    plan = await node.db.run(unit)
    [read] = [p for p in plan if p["table"] in ("key_permits", "r", "tasks")]
    assert read["key"] == "PRIMARY" and read["type"] in ("range", "eq_ref"), plan


SCHEDULE_PLANS: dict[str, tuple[str, dict[str, Any]]] = {
    "schedules_due_lock": ("schedules_due", {"limit": 500}),
    "schedules_due_times": ("schedules_due", {"limit": 1}),
    "fires_newest": ("PRIMARY", {"limit": 10}),
    "fires_between": ("PRIMARY", {}),
    "fires_prune": ("schedule_fires_age", {"limit": 500}),
    "backfills_running_lock": ("schedule_backfills_state", {"limit": 8}),
    "backfills_of": ("schedule_backfills_schedule", {"limit": 100}),
}


@pytest.mark.parametrize("query", sorted(SCHEDULE_PLANS))
async def test_scheduler_queries_use_their_index_without_sorting(
    node: Node, clock: FakeClock, query: str
) -> None:
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's")
    from orbit_server.audit import Actor
    from orbit_server.pulse.schedules import Definition, TimingSpec

    for i in range(40):
        definition = Definition(
            TimingSpec(None, "UTC", 1000 * (1 + i % 5)), {"queue": "q", "type": "t"}
        )
        await node.schedules.create(SCOPE, f"s{i}", definition, paused=False, actor=Actor("t"))
    clock.advance(timedelta(seconds=30))
    while (await node.scheduler.run_due()).handled:
        pass
    for i in range(20):
        await node.schedules.backfill(SCOPE, f"s{i}", clock.now() - timedelta(seconds=60),
                                      clock.now(), actor=Actor("t"))  # fmt: skip
    [first] = await node.schedules.list_schedules(SCOPE, after=None, limit=1)
    index, params = SCHEDULE_PLANS[query]
    values = {
        "tenant": SCOPE.tenant,
        "environment": SCOPE.environment,
        "now": clock.now(),
        "before": clock.now(),
        "schedule_id": first.schedule.id,
        "first": clock.now() - timedelta(seconds=20),
        "last": clock.now(),
        **params,
    }
    await assert_served_in_order(node, query, values, index)


WEAVE_PLANS: dict[str, tuple[str, dict[str, Any]]] = {
    # All of the scope's rows match: the primary key's order serves it as well.
    "workflows_list": ("workflows_scope|PRIMARY", {"before": "~", "limit": 50}),
    "workflows_list_by_definition": ("workflows_definition", {"before": "~", "limit": 50}),
    "workflows_list_by_state": ("workflows_state", {"before": "~", "limit": 50}),
    # Either filter's index serves it in order when it alone is as selective here.
    "workflows_list_by_definition_state": (
        "workflows_definition_state|workflows_definition|workflows_state",
        {"before": "~", "limit": 50},
    ),
    "workflow_steps_list": ("PRIMARY|workflow_steps_order", {"after": 0, "limit": 50}),
    "workflow_steps_main": ("workflow_steps_main", {"limit": 500}),
    "workflow_step_outputs": ("workflow_steps_children|workflow_steps_main", {}),
    "workflow_steps_due": ("workflow_steps_wake", {"limit": 500}),
    "task_event_list_pending_owned": (
        "task_events_owned",
        {"owner_kind": "workflow", "after": "", "limit": 500},
    ),
    "workflow_signals_pending": ("workflow_signals_pending", {"limit": 100}),
    "workflow_definitions_list": ("PRIMARY", {"after_name": "", "after_version": "", "limit": 50}),
    "workflow_definition_latest_version": ("workflow_definitions_latest", {}),
}


async def seed_workflows(node: Node) -> str:
    """Workflows of every kind of row the weave queries read; answers a mapping instance's id."""
    from orbit_server.audit import Actor

    mapping = {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 100,
               "task": {"queue": "wf", "type": "work"}, "next": "after"}  # fmt: skip
    body = {"name": "plan", "version": "1",
            "steps": [mapping, {"id": "after", "kind": "succeed"}]}  # fmt: skip
    await node.workflows.publish(SCOPE, body, actor=Actor("t"))
    quick = {"name": "quick", "version": "1", "steps": [{"id": "done", "kind": "succeed"}]}
    await node.workflows.publish(SCOPE, quick, actor=Actor("t"))
    ids = []
    for _ in range(3):
        seen, _ = await node.workflows.start(
            SCOPE, "plan", version=None, input_={"items": list(range(300))}, idempotency_key=None
        )
        ids.append(seen.workflow.id)
    waiting = {"name": "waiting", "version": "1",
               "steps": [{"id": "t", "kind": "task", "queue": "other", "type": "t"}]}  # fmt: skip
    await node.workflows.publish(SCOPE, waiting, actor=Actor("t"))
    for i in range(150):  # other instances: finished at once, or running on
        await node.workflows.start(SCOPE, "quick" if i % 3 else "waiting", version=None,
                                   input_={}, idempotency_key=None)  # fmt: skip
    # Result events: of the workflows' tasks, and (more) of plain tasks, none processed yet.
    await node.tasks.submit_many(SCOPE, [TaskSpec(queue="wf", type="work") for _ in range(400)])
    session = Session("sess_plan", "node-1", "worker-plan")
    leases = await node.workers.claim(SCOPE, session, [Want("wf", "work", 1000)], limit=1000)
    await node.workers.start_many([lease.ref for lease in leases])
    for lease in leases:
        await node.workers.complete(lease.ref, None)
    return ids[0]


@dataclass
class Seeded:
    """Databases seeded once for this module's tests: name → (database, what the seed
    answered). The tests only EXPLAIN (which writes nothing), so they can share one."""

    server: MySQLServerForTests | None = None
    databases: dict[str, tuple[str, str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def seeded() -> Iterator[Seeded]:
    found = Seeded()
    yield found
    server = found.server
    if server is not None:

        async def drop() -> None:
            for database, _ in found.databases.values():
                await server.drop(database)

        asyncio.run(drop())


@pytest.fixture(params=DIALECTS)
async def workflows_node(
    request: pytest.FixtureRequest, seeded: Seeded, settings: Settings, clock: FakeClock
) -> AsyncIterator[tuple[Node, str]]:
    """A node on a MariaDB database holding :func:`seed_workflows`' rows, and the id it
    answered. The first test seeds it (the seed takes seconds), the others read it."""
    if request.param != "mariadb":
        pytest.skip("the plans checked here are InnoDB's")
    server: MySQLServerForTests = request.getfixturevalue("mysql_server")
    if "workflows" not in seeded.databases:
        seeded.server = server
        name = await server.create()
        db = open_database(server.url_for(name), pool_max=8)
        try:
            await db.connect()
            await migrate(db)
            answer = await seed_workflows(await build_node(settings, db=db, clock=FakeClock()))
        finally:
            await db.close()
        seeded.databases["workflows"] = (name, answer)
    name, workflow_id = seeded.databases["workflows"]
    db = open_database(server.url_for(name), pool_max=8)
    try:
        yield await build_node(settings, db=db, clock=clock), workflow_id
    finally:
        await db.close()


@pytest.mark.parametrize("query", sorted(WEAVE_PLANS))
async def test_weave_queries_use_their_index_without_sorting(
    workflows_node: tuple[Node, str], query: str
) -> None:
    node, workflow_id = workflows_node
    index, params = WEAVE_PLANS[query]
    values = {
        "tenant": SCOPE.tenant, "environment": SCOPE.environment, "definition": "plan",
        "state": "running", "workflow_id": workflow_id, "parent_key": "each", "name": "plan",
        "now": datetime(2100, 1, 1, tzinfo=UTC), **params,
    }  # fmt: skip
    await assert_served_in_order(node, query, values, index)


async def test_a_claims_read_back_finds_each_tasks_workflow_by_its_primary_key(
    node: Node,
) -> None:
    """The read-back of leased rows joins the workflow of a step's task (its delivery names
    the definition and version): a primary-key look-up per row, never a scan of workflows."""
    if node.db.dialect != "mysql":
        pytest.skip("the plans checked here are InnoDB's")
    done = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="emails", type="send")] * 200)
    sql, args = node.db.queries.bind(
        "tasks_get_leased",
        {"task_ids": [s.task.id for s in done][:20], "workflow_kind": "workflow"},
    )

    async def unit(tx: Tx) -> list[dict[str, Any]]:
        return await explain(tx, sql, tuple(args))

    plan = await node.db.run(unit)
    by_table = {p["table"]: p for p in plan}
    assert by_table["t"]["key"] == "PRIMARY" and by_table["t"]["type"] in ("range", "eq_ref"), plan
    assert by_table["w"]["key"] == "PRIMARY" and by_table["w"]["type"] == "eq_ref", plan
