"""Weave's harder cases on both dialects, each once a bug: work of one advancement that a
failure in the same advancement cancels, outcomes of a signal or poll inside containers,
resume after a container failed, a task retried before its event is consumed, a skip racing
the result event, full queues, a poison instance, maps begun after the work cap."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx2
import pytest

from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.pulse.service import QueueSettings
from orbit_server.pulse.worker import Want
from orbit_server.runtime.node import Node
from orbit_server.store import workflows as workflow_store
from orbit_server.weave.service import Definitions
from tests.conftest import SCOPE, bearer, make_key
from tests.service.weave_support import (
    ACTOR,
    WORKER,
    body,
    get,
    publish,
    run,
    settle,
    start,
    steps,
    task,
    task_states,
    work,
)

FAILING_PARALLEL = {"id": "both", "kind": "parallel", "on_failure": "cleanup", "branches": [
    {"name": "a", "steps": [task("a1")]},
    {"name": "b", "steps": [{"id": "bad", "kind": "fail", "error": {"code": "nope"}}]},
]}  # fmt: skip


async def test_a_branch_failing_as_a_sibling_gets_its_task_leaves_no_task_behind(
    node: Node, http: httpx2.AsyncClient
) -> None:
    await publish(node, body("pf", [FAILING_PARALLEL, task("cleanup", "cleanup")]))
    wf = await start(node, "pf", {})
    rows = await steps(node, wf.id)
    assert (await get(node, wf.id)).state == "running"
    assert rows["both"].state == "failed" and rows["a1"].state == "cancelled"
    assert rows["cleanup"].state == "running"
    assert list((await task_states(node, wf.id)).values()) == ["pending"]  # cleanup's only
    token = await make_key(node, SCOPE, Role.OPERATOR)
    answer = await http.post("/v1/workflows", json={"definition": "pf"}, headers=bearer(token))
    assert answer.status_code == 201, answer.text


async def test_a_map_item_failing_as_it_starts_cancels_the_items_of_the_same_advancement(
    node: Node,
) -> None:
    mapping = {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 5,
               "task": {"queue": "wf", "type": "work", "params": "{'v': 10 / item}"}}  # fmt: skip
    await publish(node, body("mf", [mapping]))
    wf = await start(node, "mf", {"items": [1, 2, 0, 3]})
    failed = await get(node, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert (failed.error["step"], failed.error["cause"]) == ("each", "each:i2")
    assert await task_states(node, wf.id) == {}  # the first two items' tasks never existed


async def test_success_and_failure_of_siblings_in_one_pass_follow_on_failure(node: Node) -> None:
    await publish(
        node,
        body("pk", [
            {"id": "both", "kind": "parallel", "on_failure": "cleanup", "branches": [
                {"name": "a", "steps": [task("a1", "a", next="a2"), task("a2", "a2")]},
                {"name": "b", "steps": [task("b1", "b")]},
            ]},
            task("cleanup", "cleanup"),
        ]),
    )  # fmt: skip
    wf = await start(node, "pk", {})
    assert await work(node, type_="a") == [{}]
    await work(node, type_="b", fail=True)
    await settle(node)  # both results in one pass
    rows = await steps(node, wf.id)
    assert (await get(node, wf.id)).state == "running"
    assert rows["both"].state == "failed" and rows["cleanup"].state == "running"
    assert "a2" not in rows or rows["a2"].state == "cancelled"
    assert await work(node, type_="a2") == []


async def test_a_map_item_succeeding_and_one_failing_in_one_pass_follow_on_failure(
    node: Node,
) -> None:
    await publish(node, body("mk", [
        {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 2,
         "task": {"queue": "wf", "type": "work", "params": "item"}, "on_failure": "cleanup"},
        task("cleanup", "cleanup"),
    ]))  # fmt: skip
    wf = await start(node, "mk", {"items": [1, 2, 3, 4]})
    leases = await node.workers.claim(SCOPE, WORKER, [Want("wf", "work", 2)], limit=2)
    for lease in leases:
        await node.workers.start(lease.ref)
    await node.workers.complete(leases[0].ref, 1)
    await node.workers.fail(leases[1].ref, {"code": "boom", "message": "x"}, retryable=False)
    await settle(node)
    rows = await steps(node, wf.id)
    assert (await get(node, wf.id)).state == "running" and "cleanup" in rows
    assert await work(node) == []  # no item started for the failed map


async def test_a_map_begun_after_the_work_cap_keeps_its_items(node: Node) -> None:
    chain = [{"id": f"c{i}", "kind": "choice", "default": f"c{i + 1}" if i < 99 else "each",
              "choices": [{"when": "false", "next": "each"}]} for i in range(100)]  # fmt: skip
    chain.append({"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 500,
                  "task": {"queue": "wf", "type": "work", "params": "item"}})  # fmt: skip
    await publish(node, body("capmap", chain))
    wf = await start(node, "capmap", {"items": list(range(150))})
    assert (await steps(node, wf.id))["each"].state == "pending"  # past the work cap
    assert await run(node) == 150
    done = await get(node, wf.id)
    assert (done.state, done.output) == ("succeeded", list(range(150)))


async def test_a_task_error_named_like_weaves_own_codes_still_follows_on_failure(
    node: Node,
) -> None:
    await publish(node, body("d", [task("charge", on_failure="refund"), task("refund", "undo")]))
    wf = await start(node, "d", {})
    [lease] = await node.workers.claim(SCOPE, WORKER, [Want("wf", "work", 1)], limit=1)
    await node.workers.start(lease.ref)
    await node.workers.fail(lease.ref, {"code": "poll_exhausted", "message": "x"}, retryable=False)
    await settle(node)
    assert "refund" in await steps(node, wf.id)


async def test_a_signal_timing_out_in_a_branch_fails_the_parallel_to_its_on_failure(
    node: Node, clock: FakeClock
) -> None:
    await publish(node, body("pm", [
        {"id": "both", "kind": "parallel", "on_failure": "cleanup", "branches": [
            {"name": "a", "steps": [{"id": "wait", "kind": "signal", "name": "go",
                                     "timeout_ms": 60000}]},
            {"name": "b", "steps": [task("b1", "b")]},
        ]},
        task("cleanup", "cleanup"),
    ]))  # fmt: skip
    wf = await start(node, "pm", {})
    clock.advance(timedelta(minutes=2))
    await settle(node)
    rows = await steps(node, wf.id)
    assert rows["both"].error is not None and rows["both"].error["code"] == "signal_timeout"
    assert rows["cleanup"].state == "running" and rows["b1"].state == "cancelled"


async def test_resume_does_not_follow_a_branch_of_a_parallel_that_failed_meanwhile(
    node: Node,
) -> None:
    await publish(node, body("pr", [
        {"id": "both", "kind": "parallel", "on_failure": "cleanup", "branches": [
            {"name": "a", "steps": [task("a1", "a")]},
            {"name": "b", "steps": [task("b1", "b", next="b2"), task("b2", "b2")]},
        ]},
        task("cleanup", "cleanup"),
    ]))  # fmt: skip
    wf = await start(node, "pr", {})
    la = await node.workers.claim(SCOPE, WORKER, [Want("wf", "a", 1)], limit=1)
    lb = await node.workers.claim(SCOPE, WORKER, [Want("wf", "b", 1)], limit=1)
    for lease in la + lb:
        await node.workers.start(lease.ref)
    await node.workflow_control.pause(SCOPE, wf.id, reason=None, actor=ACTOR)
    await node.workers.fail(la[0].ref, {"code": "boom", "message": "x"}, retryable=False)
    await node.workers.complete(lb[0].ref, {})
    await settle(node)  # recorded, not followed
    await node.workflow_control.resume(SCOPE, wf.id, reason=None, actor=ACTOR)
    rows = await steps(node, wf.id)
    assert "b2" not in rows and rows["cleanup"].state == "running"


async def test_a_task_retried_out_of_review_before_its_event_is_consumed_runs_on(
    node: Node, clock: FakeClock
) -> None:
    await publish(node, body("r", [task("pay", side_effect="unsafe", next="after"),
                                   task("after", "after")]))  # fmt: skip
    wf = await start(node, "r", {})
    [lease] = await node.workers.claim(SCOPE, WORKER, [Want("wf", "work", 1)], limit=1)
    await node.workers.start(lease.ref)
    clock.advance(timedelta(minutes=10))
    assert await node.workers.expire_leases() == 1
    pay = (await steps(node, wf.id))["pay"]
    assert pay.task_id is not None
    await node.tasks.retry(SCOPE, pay.task_id, actor=ACTOR)
    await settle(node)  # the needs_review event: stale now
    assert (await get(node, wf.id)).state == "running"
    assert (await steps(node, wf.id))["pay"].state == "running"
    assert await work(node) == [{}]  # the retried task
    await settle(node)
    assert await work(node, type_="after") == [{}]


@pytest.mark.parametrize("db", ["mariadb"], indirect=True)
async def test_a_skip_racing_the_result_event_enters_the_next_step_once(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    await publish(node, body("s", [task("slow", next="next"),
                                   task("next", "next", params="steps.slow.output")]))  # fmt: skip
    wf = await start(node, "s", {})
    assert await work(node) == [{}]  # the result event is pending
    reached, release = asyncio.Event(), asyncio.Event()
    original = workflow_store.workflows_lock_many

    async def held(tx, ids):  # type: ignore[no-untyped-def]
        reached.set()
        await release.wait()
        return await original(tx, ids)

    monkeypatch.setattr(workflow_store, "workflows_lock_many", held)
    consuming = asyncio.create_task(node.runner.consume())
    await reached.wait()  # the events are marked, the instance not locked yet
    monkeypatch.setattr(workflow_store, "workflows_lock_many", original)
    await node.workflow_control.skip_step(SCOPE, wf.id, "slow", output={"given": True}, actor=ACTOR)
    release.set()
    await consuming
    rows = await steps(node, wf.id)
    assert list(rows) == ["slow", "next"] and rows["slow"].state == "skipped"


async def test_deferred_items_start_as_far_as_the_full_queue_has_room(
    node: Node, clock: FakeClock
) -> None:
    await node.queues.update(SCOPE, "tight", QueueSettings(max_pending=5), actor=ACTOR)
    await publish(node, body("mo", [task("first", next="each"),
        {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 8,
         "task": {"queue": "tight", "type": "item", "params": "item"}}]))  # fmt: skip
    wf = await start(node, "mo", {"items": list(range(8))})
    await work(node)
    await settle(node)
    rows = await steps(node, wf.id)
    started = [k for k, r in rows.items() if r.item is not None and r.task_id is not None]
    assert len(started) == 5  # what fits; three wait
    assert await run(node, type_="item", queue="tight") == 5
    clock.advance(timedelta(seconds=1))
    await settle(node)
    assert await run(node, type_="item", queue="tight") == 3
    assert (await get(node, wf.id)).state == "succeeded"


async def test_an_instance_whose_definition_cannot_load_fails_alone(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    await publish(node, body("good", [task("a", next="b"), task("b", "b")]))
    await publish(node, body("poison", [task("a")]))
    bad = await start(node, "poison", {})
    good = await start(node, "good", {})
    original = Definitions.load

    async def load(self, tx, scope, name, version):  # type: ignore[no-untyped-def]
        if name == "poison":
            raise ValueError("a stored definition that no longer parses")
        return await original(self, tx, scope, name, version)

    monkeypatch.setattr(Definitions, "load", load)
    await work(node)
    await settle(node)
    failed = await get(node, bad.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "advancement_failed"
    assert list(await steps(node, good.id)) == ["a", "b"]


async def test_background_cancels_write_no_audit_records(node: Node) -> None:
    mapping = {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 3,
               "task": {"queue": "wf", "type": "work"}}  # fmt: skip
    await publish(node, body("m", [mapping]))
    await start(node, "m", {"items": [1, 2, 3]})
    await work(node, fail=True, limit=1)
    await settle(node)
    records = await node.audit.list(SCOPE, limit=50)
    assert "task.cancel" not in [r.action for r in records]


async def test_maps_of_two_instances_begun_in_one_batch_keep_their_own_items(node: Node) -> None:
    await publish(node, body("twomaps", [task("a", next="each"),
        {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 150,
         "task": {"queue": "wf", "type": "item", "params": "item"}}]))  # fmt: skip
    first = await start(node, "twomaps", {"items": list(range(150))})
    second = await start(node, "twomaps", {"items": list(range(1000, 1150))})
    assert len(await work(node)) == 2  # both results are handled in one transaction
    await settle(node)
    assert await run(node, type_="item") == 300
    assert (await get(node, first.id)).output == list(range(150))
    assert (await get(node, second.id)).output == list(range(1000, 1150))
