"""Weave on both dialects with a fake clock: definitions, every step kind, result
continuation, signals, polling, pause/resume, cancel and recovery (SPEC W1–W10)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from orbit_sdk import TaskStep, Workflow
from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.errors import (
    DefinitionInvalid,
    IdempotencyConflict,
    NotFound,
    StateConflict,
    VersionExists,
)
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.service import QueueSettings
from orbit_server.runtime.node import Node
from orbit_server.store import steps as step_store
from tests.conftest import SCOPE
from tests.service.weave_support import (
    ACTOR,
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

# -- definitions ------------------------------------------------------------------------------


async def test_publishing_is_immutable_and_identical_content_is_a_no_op(node: Node) -> None:
    first = body("order", [task("a")])
    record, created = await node.workflows.publish(SCOPE, first, actor=ACTOR)
    assert created and len(record.digest) == 64
    again, created = await node.workflows.publish(SCOPE, {**first, "format": 1}, actor=ACTOR)
    assert not created and again.digest == record.digest  # defaults written out: same content
    with pytest.raises(VersionExists):
        await node.workflows.publish(SCOPE, body("order", [task("b")]), actor=ACTOR)
    await node.workflows.publish(SCOPE, {**body("order", [task("b")]), "version": "2"}, actor=ACTOR)
    await node.workflows.publish(SCOPE, body("other", [task("a")]), actor=ACTOR)
    listed = await node.workflows.list_definitions(SCOPE, name=None, after=None, limit=2)
    assert [(d.name, d.version) for d in listed] == [("order", "1"), ("order", "2")]
    rest = await node.workflows.list_definitions(SCOPE, name=None, after=("order", "2"), limit=5)
    assert [(d.name, d.version) for d in rest] == [("other", "1")]
    versions = await node.workflows.list_definitions(
        SCOPE, name="order", after=("order", "1"), limit=5
    )
    assert [d.version for d in versions] == ["2"]
    stored = await node.workflows.definition(SCOPE, "order", "2")
    assert stored.body is not None and stored.body["steps"][0]["id"] == "b"
    with pytest.raises(NotFound):
        await node.workflows.definition(SCOPE, "order", "9")


async def test_an_invalid_definition_is_refused_with_every_reason(node: Node) -> None:
    bad = body(
        "bad",
        [
            task("a", next="nowhere", params="input."),
            task("a"),
            {"id": "t", "kind": "timer"},
            {"id": "c", "kind": "choice", "choices": [{"when": "input.x", "next": "a"}]},
        ],
    )
    with pytest.raises(DefinitionInvalid) as caught:
        await node.workflows.publish(SCOPE, bad, actor=ACTOR)
    reasons = " | ".join(caught.value.details["reasons"])
    assert "step id 'a' is used twice" in reasons
    assert "next 'nowhere' is not a step of the workflow" in reasons
    assert "params" in reasons and "Syntax error" in reasons
    assert "give exactly one of duration_ms and until" in reasons
    assert "'t' cannot be reached" in reasons
    with pytest.raises(DefinitionInvalid):
        await node.workflows.publish(SCOPE, {"name": "x", "version": "1", "steps": []}, actor=ACTOR)
    with pytest.raises(DefinitionInvalid):  # an unknown field is a mistake, not ignored
        await node.workflows.publish(SCOPE, body("x", [task("a", qeue="q")]), actor=ACTOR)


# -- tasks, data and the result continuation --------------------------------------------------


async def test_task_steps_run_in_order_and_map_their_data(node: Node) -> None:
    await publish(
        node,
        body(
            "order",
            [
                task(
                    "charge",
                    params="{'amount': input.amount * 2}",
                    output="result.amount",
                    next="ship",
                ),
                task("ship", params="{'paid': steps.charge.output, 'order': input.id}"),
            ],
            output="{'charged': steps.charge.output, 'shipped': steps.ship.output.order}",
        ),
    )
    wf = await start(node, "order", {"id": "o-1", "amount": 21})
    assert wf.state == "running"
    assert await work(node) == [{"amount": 42}]
    assert (await get(node, wf.id)).state == "running"  # not advanced before the event is consumed
    await settle(node)
    assert await work(node) == [{"paid": 42, "order": "o-1"}]
    await settle(node)
    done = await get(node, wf.id)
    assert done.state == "succeeded" and done.finished_at is not None
    assert done.output == {"charged": 42, "shipped": "o-1"}
    rows = await steps(node, wf.id)
    assert [(k, r.state) for k, r in rows.items()] == [
        ("charge", "succeeded"),
        ("ship", "succeeded"),
    ]
    assert rows["charge"].output == 42


async def test_a_result_event_is_consumed_once_even_when_delivered_again(node: Node) -> None:
    await publish(node, body("two", [task("a", next="b"), task("b")]))
    wf = await start(node, "two", {"n": 1})
    await work(node)
    events = await node.db.read(
        lambda tx: step_store.workflow_steps_list(tx, wf.id, after=0, limit=10)
    )
    assert len(events) == 1
    assert await node.runner.consume() == 1
    assert await node.runner.consume() == 0  # processed: nothing again
    rows = await steps(node, wf.id)
    assert list(rows) == ["a", "b"]  # exactly one new step, one new task
    assert Counter((await task_states(node, wf.id)).values()) == Counter(
        {"succeeded": 1, "pending": 1}
    )


async def test_a_node_that_died_before_advancing_leaves_the_event_to_the_next(
    node: Node, settings: Settings, clock: FakeClock
) -> None:
    await publish(node, body("two", [task("a", next="b"), task("b")]))
    wf = await start(node, "two", {})
    await work(node)  # committed with its result event; this node never consumes it
    other = await build_node(settings, db=node.db, clock=clock)
    assert await other.runner.consume() == 1
    assert list(await steps(node, wf.id)) == ["a", "b"]
    assert await node.runner.consume() == 0


async def test_a_failed_task_follows_on_failure_else_fails_the_workflow_and_can_be_retried(
    node: Node,
) -> None:
    await publish(
        node,
        body(
            "pay",
            [
                task("charge", on_failure="refund", next="done"),
                task("refund", "undo"),
                {"id": "done", "kind": "succeed"},
            ],
        ),
    )
    handled = await start(node, "pay", {})
    await work(node, fail=True)
    await settle(node)
    assert await work(node, type_="undo") == [{}]
    await settle(node)
    after = await get(node, handled.id)
    assert after.state == "succeeded"
    assert (await steps(node, handled.id))["charge"].error["code"] == "boom"  # type: ignore[index]

    await publish(node, body("plain", [task("one", next="two"), task("two")]))
    wf = await start(node, "plain", {"x": 1})
    await work(node, fail=True)
    await settle(node)
    failed = await get(node, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["step"] == "one" and failed.error["code"] == "boom"
    with pytest.raises(NotFound):  # never reached
        await node.workflow_control.retry_step(SCOPE, wf.id, "two", actor=ACTOR)
    again = await node.workflow_control.retry_step(SCOPE, wf.id, "one", actor=ACTOR)
    assert again.state == "running" and again.error is None
    assert await run(node) == 2
    assert (await get(node, wf.id)).state == "succeeded"
    assert (await steps(node, wf.id))["one"].tries == 2


# -- choice, parallel, map --------------------------------------------------------------------


async def test_choices_branch_and_loops_give_each_visit_its_own_key(node: Node) -> None:
    await publish(
        node,
        body(
            "loop",
            [
                task("count", output="result.n", next="again"),
                {
                    "id": "again",
                    "kind": "choice",
                    "default": "done",
                    "choices": [{"when": "steps.count.output < 3", "next": "count"}],
                },
                {"id": "done", "kind": "succeed", "output": "steps.count.output"},
            ],
        ),
    )
    wf = await start(node, "loop", {})
    counter = iter(range(1, 10))
    assert await run(node, lambda _: {"n": next(counter)}) == 3
    done = await get(node, wf.id)
    assert done.state == "succeeded" and done.output == 3
    assert list(await steps(node, wf.id)) == [
        "count",
        "again",
        "count:2",
        "again:2",
        "count:3",
        "again:3",
        "done",
    ]


async def test_no_choice_holding_and_no_default_fails_the_workflow(node: Node) -> None:
    await publish(
        node,
        body(
            "c",
            [
                {"id": "c", "kind": "choice", "choices": [{"when": "input.go", "next": "t"}]},
                task("t"),
            ],
        ),
    )
    wf = await start(node, "c", {"go": False})
    failed = await get(node, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "no_choice"


async def test_parallel_branches_join_into_one_output(node: Node) -> None:
    await publish(
        node,
        body(
            "fan",
            [
                {
                    "id": "both",
                    "kind": "parallel",
                    "next": "after",
                    "branches": [
                        {
                            "name": "left",
                            "steps": [task("l1", "left", next="l2"), task("l2", "left")],
                        },
                        {"name": "right", "steps": [task("r1", "right")]},
                    ],
                },
                task("after", params="steps.both.output"),
            ],
        ),
    )
    wf = await start(node, "fan", {"v": 1})
    assert await work(node, type_="right") == [{"v": 1}]
    await settle(node)
    assert (await steps(node, wf.id))["both"].state == "running"  # left not done yet
    assert await run(node, lambda p: {"left": p}, type_="left") == 2
    assert await work(node) == [{"left": {"left": {"v": 1}}, "right": {"v": 1}}]
    await settle(node)
    assert (await get(node, wf.id)).state == "succeeded"


async def test_a_failing_branch_cancels_its_siblings_and_fails_the_parallel(node: Node) -> None:
    await publish(
        node,
        body(
            "fan",
            [
                {
                    "id": "both",
                    "kind": "parallel",
                    "on_failure": "cleanup",
                    "branches": [
                        {"name": "a", "steps": [task("a", "a")]},
                        {"name": "b", "steps": [task("b", "b")]},
                    ],
                },
                task("cleanup", "cleanup"),
            ],
        ),
    )
    wf = await start(node, "fan", {})
    await work(node, type_="a", fail=True)
    await settle(node)
    rows = await steps(node, wf.id)
    assert rows["both"].state == "failed" and rows["b"].state == "cancelled"
    assert (await task_states(node, wf.id))["b"] == "cancelled"
    assert await run(node, type_="cleanup") == 1
    assert (await get(node, wf.id)).state == "succeeded"


async def test_a_map_keeps_at_most_max_concurrency_items_running_and_fans_in_in_order(
    node: Node,
) -> None:
    await publish(
        node,
        body(
            "resize",
            [
                {
                    "id": "each",
                    "kind": "map",
                    "items": "input.items",
                    "max_concurrency": 7,
                    "task": {
                        "queue": "wf",
                        "type": "work",
                        "params": "{'n': item, 'at': index}",
                        "output": "result.n * 10",
                    },
                },
            ],
        ),
    )
    wf = await start(node, "resize", {"items": list(range(40))})
    seen: list[int] = []
    while True:
        ran = await work(node)
        assert len(ran) <= 7  # never more than max_concurrency started at once
        if not ran:
            break
        seen += [p["n"] for p in ran]
        await settle(node)
    assert sorted(seen) == list(range(40))
    done = await get(node, wf.id)
    assert done.state == "succeeded" and done.output == [n * 10 for n in range(40)]
    rows = await steps(node, wf.id)
    assert rows["each:i39"].item == 39 and rows["each:i0"].parent_key == "each"


async def test_an_empty_map_succeeds_at_once_and_a_failing_item_fails_the_map(node: Node) -> None:
    mapping = {
        "id": "each",
        "kind": "map",
        "items": "input.items",
        "max_concurrency": 2,
        "task": {"queue": "wf", "type": "work"},
    }
    await publish(node, body("m", [mapping]))
    empty = await start(node, "m", {"items": []})
    assert (await get(node, empty.id)).output == []
    wf = await start(node, "m", {"items": [1, 2, 3]})
    await work(node, fail=True, limit=1)
    await settle(node)
    failed = await get(node, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert (failed.error["step"], failed.error["cause"]) == ("each", "each:i0")
    assert Counter((await task_states(node, wf.id)).values()) == Counter(
        {"failed": 1, "cancelled": 1}
    )


# -- timers, signals, polls -------------------------------------------------------------------


async def test_a_timer_waits_on_the_clock_without_a_task(node: Node, clock: FakeClock) -> None:
    await publish(
        node,
        body(
            "t", [{"id": "nap", "kind": "timer", "duration_ms": 60_000, "next": "go"}, task("go")]
        ),
    )
    wf = await start(node, "t", {})
    assert await settle(node) == 0
    assert await node.runner.next_wake() == clock.now() + timedelta(minutes=1)
    clock.advance(timedelta(seconds=59))
    assert await settle(node) == 0 and await work(node) == []
    clock.advance(timedelta(seconds=1))
    await settle(node)
    assert await run(node) == 1
    assert (await get(node, wf.id)).state == "succeeded"


async def test_signals_sent_early_are_kept_duplicates_apply_once_and_waits_time_out(
    node: Node, clock: FakeClock
) -> None:
    await publish(
        node,
        body(
            "approve",
            [
                task("prepare", next="wait"),
                {
                    "id": "wait",
                    "kind": "signal",
                    "name": "approved",
                    "timeout_ms": 3_600_000,
                    "on_timeout": "expired",
                    "output": "signal.by",
                    "next": "done",
                },
                {"id": "done", "kind": "succeed", "output": "steps.wait.output"},
                {"id": "expired", "kind": "fail", "error": {"code": "expired", "message": "late"}},
            ],
        ),
    )
    early = await start(node, "approve", {})
    sent = await node.workflows.signal(SCOPE, early.id, "approved", {"by": "ann"}, "k1")
    assert sent.state == "pending"
    again = await node.workflows.signal(SCOPE, early.id, "approved", {"by": "ann"}, "k1")
    assert again.id == sent.id  # the same signal, not a second one
    with pytest.raises(IdempotencyConflict):
        await node.workflows.signal(SCOPE, early.id, "approved", {"by": "bob"}, "k1")
    seen = await node.workflows.inspect(SCOPE, early.id)
    assert [s.name for s in seen.signals] == ["approved"]
    await run(node)
    done = await get(node, early.id)
    assert done.state == "succeeded" and done.output == "ann"

    late = await start(node, "approve", {})
    await run(node)
    seen = await node.workflows.inspect(SCOPE, late.id)
    assert [(w.key, w.kind) for w in seen.waits] == [("wait", "signal")]
    delivered = await node.workflows.signal(SCOPE, late.id, "approved", {"by": "cy"}, None)
    assert delivered.state == "delivered" and delivered.step_key == "wait"
    await settle(node)
    assert (await get(node, late.id)).output == "cy"

    never = await start(node, "approve", {})
    await run(node)
    clock.advance(timedelta(hours=1))
    await settle(node)
    expired = await get(node, never.id)
    assert expired.state == "failed" and expired.error is not None
    assert expired.error["code"] == "expired"
    assert (await steps(node, never.id))["wait"].error["code"] == "signal_timeout"  # type: ignore[index]
    with pytest.raises(StateConflict):
        await node.workflows.signal(SCOPE, never.id, "approved", {}, None)


async def test_a_poll_stops_at_max_rounds_and_takes_its_exhausted_branch(
    node: Node, clock: FakeClock
) -> None:
    await publish(
        node,
        body(
            "poll",
            [
                {
                    "id": "check",
                    "kind": "poll",
                    "until": "result.ready",
                    "interval_ms": 10_000,
                    "max_rounds": 3,
                    "on_exhausted": "gave_up",
                    "task": {"queue": "wf", "type": "check", "params": "{'round': round}"},
                },
                {"id": "gave_up", "kind": "fail", "error": {"code": "never_ready"}},
            ],
        ),
    )
    wf = await start(node, "poll", {})
    rounds = []
    for _ in range(3):
        ran = await work(node, lambda p: {"ready": False, "round": p["round"]}, type_="check")
        rounds += ran
        await settle(node)
        assert await work(node, type_="check") == []  # no task between rounds
        seen = await node.workflows.inspect(SCOPE, wf.id)
        if len(rounds) < 3:
            assert [w.kind for w in seen.waits] == ["poll"]
        clock.advance(timedelta(seconds=10))
        await settle(node)
    assert rounds == [{"round": 1}, {"round": 2}, {"round": 3}]
    done = await get(node, wf.id)
    assert done.state == "failed" and done.error is not None
    assert done.error["code"] == "never_ready"
    rows = await steps(node, wf.id)
    assert rows["check"].error["code"] == "poll_exhausted"  # type: ignore[index]
    assert [k for k in rows if k.startswith("check:r")] == ["check:r1", "check:r2", "check:r3"]


async def test_a_poll_also_stops_at_max_duration_and_succeeds_once_until_holds(
    node: Node, clock: FakeClock
) -> None:
    poll = {
        "id": "check",
        "kind": "poll",
        "until": "result.ready",
        "interval_ms": 10_000,
        "max_rounds": 100,
        "max_duration_ms": 25_000,
        "task": {"queue": "wf", "type": "check"},
    }
    await publish(node, body("poll", [poll]))
    wf = await start(node, "poll", {})
    for _ in range(3):
        await work(node, lambda _: {"ready": False}, type_="check")
        await settle(node)
        clock.advance(timedelta(seconds=10))
        await settle(node)
    failed = await get(node, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "poll_exhausted"  # 3 rounds: a 4th would start after 25 s

    ok = await start(node, "poll", {})
    await work(node, lambda _: {"ready": False}, type_="check")
    await settle(node)
    clock.advance(timedelta(seconds=10))
    await settle(node)
    await work(node, lambda _: {"ready": True, "v": 7}, type_="check")
    await settle(node)
    done = await get(node, ok.id)
    assert done.state == "succeeded" and done.output == {"ready": True, "v": 7}


async def test_a_poll_the_builder_writes_without_an_interval_waits_one_second(
    node: Node, clock: FakeClock
) -> None:
    wf = Workflow("poll", version="1")
    wf.poll("p", task=TaskStep(queue="wf", type="check"), until="result.done", max_rounds=3)
    assert "interval_ms" not in wf.to_dict()["steps"][0]
    await publish(node, wf.to_dict())
    started = await start(node, "poll", {})
    await work(node, lambda _: {"done": False}, type_="check")
    await settle(node)
    clock.advance(timedelta(milliseconds=999))
    await settle(node)
    assert await work(node, type_="check") == []  # not yet: the default interval is 1 s
    clock.advance(timedelta(milliseconds=1))
    await settle(node)
    await work(node, lambda _: {"done": True}, type_="check")
    await settle(node)
    assert (await get(node, started.id)).state == "succeeded"


# -- pause, resume, cancel, review ------------------------------------------------------------


async def test_pause_lets_started_work_finish_starts_nothing_new_and_resume_goes_on(
    node: Node, clock: FakeClock
) -> None:
    await publish(
        node,
        body(
            "p",
            [
                {
                    "id": "each",
                    "kind": "map",
                    "items": "input.items",
                    "max_concurrency": 5,
                    "task": {"queue": "wf", "type": "work"},
                    "next": "nap",
                },
                {"id": "nap", "kind": "timer", "duration_ms": 1000, "next": "last"},
                task("last", "last"),
            ],
        ),
    )
    wf = await start(node, "p", {"items": list(range(8))})
    paused = await node.workflow_control.pause(SCOPE, wf.id, reason="maintenance", actor=ACTOR)
    assert paused.state == "paused" and paused.control_version == 1
    assert await work(node) == []  # the gate holds the five pending tasks back
    await node.workflow_control.resume(SCOPE, wf.id, reason=None, actor=ACTOR)
    leases = await work(node, limit=3)  # three start ...
    await node.workflow_control.pause(SCOPE, wf.id, reason=None, actor=ACTOR)
    await settle(node)
    rows = await steps(node, wf.id)
    assert sum(1 for r in rows.values() if r.item is not None and r.state == "succeeded") == 3
    started = [r for r in rows.values() if r.item is not None and r.task_id is not None]
    assert len(started) == 5  # ... none new
    assert len(leases) == 3
    assert await work(node) == []
    resumed = await node.workflow_control.resume(SCOPE, wf.id, reason=None, actor=ACTOR)
    assert resumed.control_version == 4
    await run(node)
    assert (await steps(node, wf.id))["nap"].state == "waiting"
    await node.workflow_control.pause(SCOPE, wf.id, reason=None, actor=ACTOR)
    clock.advance(timedelta(seconds=5))
    await settle(node)  # the due timer is parked, not fired
    assert (await steps(node, wf.id))["nap"].state == "waiting"
    await node.workflow_control.resume(SCOPE, wf.id, reason=None, actor=ACTOR)
    await settle(node)
    assert await run(node, type_="last") == 1
    assert (await get(node, wf.id)).state == "succeeded"
    with pytest.raises(StateConflict):
        await node.workflow_control.pause(SCOPE, wf.id, reason=None, actor=ACTOR)


async def test_cancel_cancels_the_step_tasks_through_pulse(node: Node) -> None:
    await publish(
        node,
        body(
            "c",
            [
                {
                    "id": "both",
                    "kind": "parallel",
                    "branches": [
                        {"name": "a", "steps": [task("a")]},
                        {"name": "b", "steps": [task("b", "other")]},
                    ],
                }
            ],
        ),
    )
    wf = await start(node, "c", {})
    assert await work(node) == [{}]  # "a" ran; "b" (another type) is pending
    cancelled = await node.workflow_control.cancel(SCOPE, wf.id, reason="not needed", actor=ACTOR)
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    assert (await task_states(node, wf.id))["b"] == "cancelled"
    await settle(node)  # the result event of "a" changes nothing now
    assert (await get(node, wf.id)).state == "cancelled"
    again = await node.workflow_control.cancel(SCOPE, wf.id, reason=None, actor=ACTOR)
    assert again.state == "cancelled"


async def test_unsafe_work_of_unknown_outcome_puts_the_workflow_in_review_until_resolved(
    node: Node, clock: FakeClock
) -> None:
    await publish(
        node,
        body(
            "r",
            [
                task("pay", side_effect="unsafe", next="after"),
                task("after", "after", params="steps.pay.output"),
            ],
        ),
    )
    wf = await start(node, "r", {})
    from orbit_server.pulse.worker import Want
    from tests.service.weave_support import WORKER

    [lease] = await node.workers.claim(SCOPE, WORKER, [Want("wf", "work", 1)], limit=1)
    await node.workers.start(lease.ref)
    clock.advance(timedelta(minutes=10))  # the lease ends: outcome unknown
    assert await node.workers.expire_leases() == 1
    await settle(node)
    assert (await get(node, wf.id)).state == "needs_review"
    assert (await steps(node, wf.id))["pay"].state == "needs_review"
    with pytest.raises(NotFound):  # not reached
        await node.workflow_control.resolve_step(
            SCOPE, wf.id, "after", succeeded=True, output=None, error=None, actor=ACTOR
        )
    await node.workflow_control.resolve_step(
        SCOPE, wf.id, "pay", succeeded=True, output={"ok": 1}, error=None, actor=ACTOR
    )
    await settle(node)
    assert (await get(node, wf.id)).state == "running"
    assert await work(node, type_="after") == [{"ok": 1}]


async def test_skip_supplies_a_steps_output_and_the_workflow_goes_on(node: Node) -> None:
    await publish(
        node,
        body("s", [task("slow", next="next"), task("next", "next", params="steps.slow.output")]),
    )
    wf = await start(node, "s", {})
    await node.workflow_control.skip_step(SCOPE, wf.id, "slow", output={"given": True}, actor=ACTOR)
    assert (await task_states(node, wf.id))["slow"] == "cancelled"
    assert await work(node, type_="next") == [{"given": True}]
    await settle(node)
    assert (await get(node, wf.id)).state == "succeeded"
    assert (await steps(node, wf.id))["slow"].state == "skipped"


async def test_start_is_idempotent_and_lists_filter_by_definition_and_state(node: Node) -> None:
    await publish(node, body("a", [task("t")]))
    await publish(node, body("b", [{"id": "x", "kind": "succeed"}]))
    first, created = await node.workflows.start(
        SCOPE, "a", version=None, input_={"n": 1}, idempotency_key="k"
    )
    again, created_again = await node.workflows.start(
        SCOPE, "a", version=None, input_={"n": 1}, idempotency_key="k"
    )
    assert created and not created_again and again.workflow.id == first.workflow.id
    assert [r.key for r in again.steps] == [r.key for r in first.steps] == ["t"]
    with pytest.raises(IdempotencyConflict):
        await node.workflows.start(SCOPE, "a", version=None, input_={"n": 2}, idempotency_key="k")
    with pytest.raises(IdempotencyConflict):  # asked for a version: another request
        await node.workflows.start(SCOPE, "a", version="1", input_={"n": 1}, idempotency_key="k")
    done = await start(node, "b", {})
    assert done.state == "succeeded"
    listed = await node.workflows.list_workflows(
        SCOPE, definition=None, state=None, before=None, limit=10
    )
    assert [w.id for w in listed] == [done.id, first.workflow.id]
    by_state = await node.workflows.list_workflows(
        SCOPE, definition=None, state="running", before=None, limit=10
    )
    assert [w.id for w in by_state] == [first.workflow.id]
    by_def = await node.workflows.list_workflows(
        SCOPE, definition="b", state=None, before=None, limit=10
    )
    assert [w.id for w in by_def] == [done.id]
    with pytest.raises(NotFound):
        await node.workflows.start(SCOPE, "missing", version=None, input_={}, idempotency_key=None)


async def test_steps_without_tasks_are_capped_per_advancement(node: Node) -> None:
    chain: list[dict[str, Any]] = [
        {"id": f"c{i}", "kind": "choice", "default": f"c{i + 1}",
         "choices": [{"when": "false", "next": f"c{i + 1}"}]}
        for i in range(250)
    ]  # fmt: skip
    await publish(node, body("spin", [*chain, {"id": "c250", "kind": "succeed"}]))
    wf = await start(node, "spin", {})
    rows = await steps(node, wf.id)
    assert len(rows) == 101  # 100 entered, the next written pending and due now
    assert list(rows.values())[-1].state == "pending"
    await node.runner.wake_due()
    assert len(await steps(node, wf.id)) == 201  # the pending one and 99 more, 1 pending
    await node.runner.wake_due()
    assert len(await steps(node, wf.id)) == 251
    assert (await get(node, wf.id)).state == "succeeded"
    assert await node.runner.wake_due() == 0


async def test_a_loop_that_no_task_or_signal_could_end_is_refused_at_publish(node: Node) -> None:
    itself = body("loop", [{"id": "loop", "kind": "choice",
                            "choices": [{"when": "true", "next": "loop"}]}])  # fmt: skip
    through_a_timer = body("nap", [
        {"id": "a", "kind": "choice", "choices": [{"when": "input.go", "next": "b"}],
         "default": "done"},
        {"id": "b", "kind": "timer", "duration_ms": 0, "next": "a"},
        {"id": "done", "kind": "succeed"},
    ])  # fmt: skip
    for definition, loop in (
        (itself, "'loop' -> 'loop'"),
        (through_a_timer, "'a' -> 'b' -> 'a'"),
    ):
        with pytest.raises(DefinitionInvalid) as caught:
            await publish(node, definition)
        assert caught.value.details["reasons"] == [
            f"steps {loop} form a loop without a task, map, poll or signal step in it, "
            "which nothing could end"
        ]
    # A branch's loop sees what its sibling branches do: waiting there for a task of another
    # branch to finish is a loop that ends.
    await publish(node, body("watch", [{"id": "p", "kind": "parallel", "branches": [
        {"name": "work", "steps": [task("fetch")]},
        {"name": "watch", "steps": [
            {"id": "check", "kind": "choice", "default": "nap",
             "choices": [{"when": "has(steps.fetch)", "next": "seen"}]},
            {"id": "nap", "kind": "timer", "duration_ms": 100, "next": "check"},
            {"id": "seen", "kind": "succeed"},
        ]},
    ]}]))  # fmt: skip
    # A loop that runs a task (or waits for a signal) is a loop its data can end.
    await publish(node, body("count", [
        task("count", next="again"),
        {"id": "again", "kind": "choice", "choices": [{"when": "true", "next": "count"}]},
    ]))  # fmt: skip
    await publish(node, body("parallel", [
        {"id": "p", "kind": "parallel", "next": "again",
         "branches": [{"name": "x", "steps": [task("x")]}]},
        {"id": "again", "kind": "choice", "choices": [{"when": "true", "next": "p"}]},
    ]))  # fmt: skip


async def test_an_instance_fails_when_it_would_pass_its_step_execution_limit(
    node: Node, settings: Settings, clock: FakeClock
) -> None:
    limited = dataclasses.replace(settings, workflow_max_step_executions=100)
    small = await build_node(limited, db=node.db, clock=clock)
    await publish(small, body("count", [
        task("count", output="result", next="again"),
        {"id": "again", "kind": "choice", "choices": [{"when": "true", "next": "count"}]},
    ]))  # fmt: skip
    wf = await start(small, "count", {})
    assert await run(small) == 50  # 50 visits of count and of again: 100 executions
    failed = await get(small, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "step_limit_exceeded"
    assert "at most 100 (ORBIT_WORKFLOW_MAX_STEP_EXECUTIONS)" in failed.error["message"]
    assert len(await steps(small, wf.id)) == 100

    mapping = {"id": "each", "kind": "map", "items": "input", "task": {"queue": "wf",
               "type": "work", "params": "item"}}  # fmt: skip
    await publish(small, body("wide", [mapping]))
    wide = await start(small, "wide", list(range(100)))  # the map and 100 items: 101
    done = await get(small, wide.id)
    assert (done.state, done.error["code"]) == ("failed", "step_limit_exceeded")  # type: ignore[index]
    assert await work(small) == []  # no item's task was made


async def test_a_task_pulse_would_refuse_fails_its_step_and_others_go_on(node: Node) -> None:
    await publish(
        node, body("keyed", [task("a", next="b"), task("b", "b", concurrency_key="input.k")])
    )
    await publish(node, body("plain", [task("x", next="y"), task("y", "y")]))
    bad = await start(node, "keyed", {"k": "y" * 300})
    await start(node, "plain", {})
    await work(node)
    await settle(node)
    failed = await get(node, bad.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "task_invalid" and failed.error["step"] == "b"
    assert await work(node, type_="y") == [{}]  # the other instance advanced


async def test_a_full_queue_holds_back_only_the_steps_bound_for_it(
    node: Node, clock: FakeClock
) -> None:
    await node.queues.update(SCOPE, "tight", QueueSettings(max_pending=1), actor=ACTOR)
    await node.tasks.submit(SCOPE, TaskSpec(queue="tight", type="filler"))
    await publish(node, body("to-tight", [task("a", next="b"), task("b", "b", queue="tight")]))
    await publish(node, body("plain", [task("x", next="y"), task("y", "y")]))
    held = await start(node, "to-tight", {})
    await start(node, "plain", {})
    await work(node)
    await settle(node)
    assert await work(node, type_="y") == [{}]  # not held back by the full queue
    rows = await steps(node, held.id)
    assert rows["b"].state == "pending" and rows["b"].task_id is None
    assert (await get(node, held.id)).state == "running"
    assert await work(node, type_="filler", queue="tight") == [{}]  # room again
    clock.advance(timedelta(seconds=1))
    await settle(node)
    assert await work(node, type_="b", queue="tight") == [{}]
    await settle(node)
    assert (await get(node, held.id)).state == "succeeded"


async def test_an_instance_that_cannot_advance_fails_visibly_and_blocks_no_other(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbit_server.weave.kinds import Planner

    ended = Planner.task_ended

    def broken(self: Planner, row: Any, *outcome: Any) -> None:
        if self.wf.input == {"boom": True}:
            raise RuntimeError("a bug")
        ended(self, row, *outcome)

    monkeypatch.setattr(Planner, "task_ended", broken)
    await publish(node, body("two", [task("a", next="b"), task("b", "b")]))
    bad = await start(node, "two", {"boom": True})
    good = await start(node, "two", {})
    await work(node)
    await settle(node)
    failed = await get(node, bad.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "advancement_failed"
    assert "a bug" not in failed.error["message"]  # the log has it, not the API
    assert await work(node, type_="b") == [{}]
    await settle(node)
    assert (await get(node, good.id)).state == "succeeded"


async def test_a_wide_map_starts_its_items_100_per_transaction(node: Node) -> None:
    mapping = {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 250,
               "task": {"queue": "wf", "type": "work", "params": "item"}}  # fmt: skip
    await publish(node, body("wide", [mapping]))
    wf = await start(node, "wide", {"items": list(range(300))})
    rows = await steps(node, wf.id)
    assert len([r for r in rows.values() if r.item is not None]) == 100  # the first batch
    assert rows["each"].wake_at is not None  # more to start: due now
    await settle(node)
    rows = await steps(node, wf.id)
    assert len([r for r in rows.values() if r.task_id is not None]) == 250  # max_concurrency
    assert rows["each"].wake_at is None
    assert await run(node) == 300
    assert (await get(node, wf.id)).output == list(range(300))


async def test_finished_instances_are_forgotten_after_the_retention_in_bounded_parts(
    node: Node, clock: FakeClock
) -> None:
    mapping = {"id": "each", "kind": "map", "items": "input.items", "max_concurrency": 50,
               "task": {"queue": "wf", "type": "work", "params": "item"}}  # fmt: skip
    await publish(node, body("m", [mapping]))
    old = await start(node, "m", {"items": list(range(30))})
    await run(node)
    clock.advance(timedelta(hours=2))
    running = await start(node, "m", {"items": [1]})
    assert await node.workflows.prune_finished(3_600_000, budget=20) == 20  # steps only
    assert (await get(node, old.id)).state == "succeeded"
    assert await node.workflows.prune_finished(3_600_000, budget=20) == 12  # 11 steps + itself
    with pytest.raises(NotFound):
        await get(node, old.id)
    assert await node.workflows.prune_finished(3_600_000) == 0
    assert (await get(node, running.id)).state == "running"
    with pytest.raises(NotFound):
        await node.gates.get(SCOPE, old.gate_id)


async def test_a_succeed_steps_own_output_wins_over_the_definitions(node: Node) -> None:
    steps_ = [
        {"id": "route", "kind": "choice", "default": "plain",
         "choices": [{"when": "input.own", "next": "mine"}]},
        {"id": "mine", "kind": "succeed", "output": "'from the step'"},
        {"id": "plain", "kind": "succeed"},
    ]  # fmt: skip
    await publish(node, body("out", steps_, output="'from the definition'"))
    own = await start(node, "out", {"own": True})
    plain = await start(node, "out", {"own": False})
    assert (await get(node, own.id)).output == "from the step"
    assert (await get(node, plain.id)).output == "from the definition"


async def test_resume_wakes_the_dispatch_of_the_queues_its_tasks_wait_in(node: Node) -> None:
    await publish(node, body("held", [task("a")]))
    wf = await start(node, "held", {})
    await node.workflow_control.pause(SCOPE, wf.id, reason=None, actor=ACTOR)
    woken = node.watch.queue_event(SCOPE, "wf")  # as a dispatch loop of the queue holds it
    woken.clear()
    node.watch.take_work(SCOPE, "wf")
    await node.workflow_control.resume(SCOPE, wf.id, reason=None, actor=ACTOR)
    assert woken.is_set() and node.watch.take_work(SCOPE, "wf")
    assert await work(node) == [{}]


async def test_a_step_whose_expression_would_cost_too_much_fails_without_running_it(
    node: Node,
) -> None:
    params = "{'n': size(input.l.map(x, input.s + input.s))}"
    await publish(node, body("costly", [task("grow", params=params)]))
    wf = await start(node, "costly", {"s": "x" * 10_000, "l": list(range(7_000))})
    failed = await get(node, wf.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error["code"] == "expression_failed"
    assert "too costly to evaluate" in failed.error["message"]
    assert await work(node) == []  # no task was made


async def test_advancement_lag_is_measured_from_the_step_task_settling(
    node: Node, clock: FakeClock
) -> None:
    await publish(node, body("two", [task("a", next="b"), task("b")]))
    await start(node, "two", {})
    await work(node)  # the step's task settles now: its result event is written
    clock.advance(1500)
    assert await node.runner.consume() == 1

    def lag(name: str) -> float | None:
        return node.metrics.registry.get_sample_value(
            f"orbit_workflow_advancement_lag_seconds_{name}"
        )

    assert (lag("count"), lag("sum")) == (1, 1.5)
