"""A pass of result events reads set-wise: the active executions that finishing instances
need are read for all of them in one statement, before their plans, so each instance is
planned once, however many finish together."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orbit_server.runtime.node import Node
from orbit_server.weave import advance
from orbit_server.weave.runner import Runner
from tests.service.weave_support import body, get, publish, start, task, work
from tests.support.wrapped_database import CountingDatabase


@pytest.mark.parametrize("each", [2, 12])
async def test_finishing_instances_are_planned_once_from_one_read(
    node: Node, each: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    await publish(node, body("short", [task("only")]))
    await publish(node, body("long", [task("a", next="b"), task("b")]))
    short = [await start(node, "short", {"n": n}) for n in range(each)]
    long = [await start(node, "long", {"n": n}) for n in range(each)]
    assert len(await work(node)) == 2 * each  # every first task ends: one event each

    plans: Counter[str] = Counter()
    real_plan = advance.plan

    def counted_plan(definition: Any, view: Any, *args: Any) -> Any:
        plans[view.workflow.id] += 1
        return real_plan(definition, view, *args)

    monkeypatch.setattr(advance, "plan", counted_plan)
    counting = CountingDatabase(node.db)
    runner = Runner(counting, node.clock, node.tasks, node.workflows, instances=1000)
    assert await runner.consume() == 2 * each

    for wf in short:
        assert (await get(node, wf.id)).state == "succeeded"
    for wf in long:
        assert (await get(node, wf.id)).state == "running"
    # Every instance planned once; the finishing ones' active executions in one statement.
    assert set(plans.values()) == {1} and len(plans) == 2 * each
    assert counting.reads["workflow_steps_in_states"] == 1
