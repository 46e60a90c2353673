"""The SDK's workflow calls against the real server app, on every dialect: what the SDK's
builder and calls send is what the server accepts, and what the server answers decodes into
the SDK's types (errors included)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx2
import pytest

from orbit_sdk import (
    AsyncClient,
    ConflictError,
    IdempotencyConflictError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    StateConflictError,
    TaskStep,
    When,
    Workflow,
    WorkflowError,
)
from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.pulse.worker import Want
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, make_key, orbit_app
from tests.service.weave_support import WORKER, settle, work

START = datetime(2030, 1, 1, tzinfo=UTC)  # the fake clock's start


@pytest.fixture
async def sdk(node: Node) -> AsyncIterator[AsyncClient]:
    key = await make_key(node, SCOPE, Role.OPERATOR)
    transport = httpx2.ASGITransport(app=orbit_app(node))
    async with AsyncClient("http://orbit.test", key, transport=transport) as client:
        yield client


def order(version: str = "1") -> Workflow:
    """Charge, wait for an approval of large orders, ship in two branches."""
    wf = Workflow("order", version=version, description="charge, approve, ship")
    wf.task(
        "charge", queue="wf", type="work", params="{'amount': input.amount}",
        output="result.amount", timeout=timedelta(seconds=30), on_failure="declined",
    )  # fmt: skip
    wf.choice("route", [When("input.amount > 1000", "approve")], default="ship")
    wf.signal("approve", name="approved", timeout=timedelta(hours=1), on_timeout="declined")
    ship = wf.parallel("ship")
    ship.branch("label").task("print", queue="wf", type="print")
    ship.branch("mail").task("mail", queue="wf", type="mail")
    wf.succeed("done", output="{'charged': steps.charge.output, 'shipped': steps.ship.output}")
    wf.fail("declined", code="declined", message="the payment did not go through")
    return wf


async def test_a_builder_made_workflow_publishes_starts_signals_and_finishes(
    sdk: AsyncClient, node: Node
) -> None:
    published = await sdk.publish_workflow(order())
    assert (published.name, published.version, published.created_at) == ("order", "1", START)
    assert published.definition is not None
    assert [s["id"] for s in published.definition["steps"]][:3] == ["charge", "route", "approve"]
    assert (await sdk.publish_workflow(order())).digest == published.digest  # the same: a no-op
    assert (await sdk.get_workflow_definition("order", "1")) == published
    versions = [d async for d in sdk.iter_workflow_definitions(name="order", limit=1)]
    assert [(d.version, d.digest, d.definition) for d in versions] == [
        ("1", published.digest, None)
    ]

    run = await sdk.start_workflow("order", {"amount": 1200}, idempotency_key="order-17")
    assert (run.definition, run.version, run.state, run.input) == (
        "order", "1", "running", {"amount": 1200},
    )  # fmt: skip
    assert run.created_at == START and run.finished_at is None and not run.is_terminal
    assert [(s.key, s.type, s.state) for s in run.steps] == [("charge", "task", "running")]
    assert run.steps[0].task_id and run.waits == [] and run.pending_signals == []
    assert (await sdk.start_workflow("order", {"amount": 1200}, idempotency_key="order-17")).id == (
        run.id
    )
    with pytest.raises(IdempotencyConflictError):
        await sdk.start_workflow("order", {"amount": 5}, idempotency_key="order-17")

    assert await work(node) == [{"amount": 1200}]
    await settle(node)
    waiting = await sdk.get_workflow(run.id)
    [wait] = waiting.waits
    assert (wait.key, wait.step, wait.kind, wait.signal) == ("approve", "approve", "signal",
                                                            "approved")  # fmt: skip
    assert wait.until == START + timedelta(hours=1)
    sent = await sdk.signal_workflow(run.id, "approved", {"by": "ana"}, idempotency_key="s-1")
    assert (sent.name, sent.state, sent.step, sent.created_at) == (
        "approved", "delivered", "approve", START,
    )  # fmt: skip
    assert (await sdk.signal_workflow(run.id, "approved", {"by": "ana"},
                                      idempotency_key="s-1")).id == sent.id  # fmt: skip

    async def ship() -> None:
        while run.id not in node.workflows._finished:  # the SDK's long poll is waiting
            await asyncio.sleep(0)
        for type_ in ("print", "mail"):
            assert len(await work(node, type_=type_)) == 1
        await settle(node)

    async with asyncio.timeout(10):
        done, _ = await asyncio.gather(sdk.wait_for_workflow(run.id, timeout=30), ship())
    assert done.is_terminal and done.state == "succeeded" and done.finished_at == START
    shipped = {"label": {"amount": 1200}, "mail": {"amount": 1200}}  # params default to input
    assert done.output == {"charged": 1200, "shipped": shipped}
    steps = [s async for s in sdk.iter_workflow_steps(run.id, limit=2)]
    assert [(s.key, s.state) for s in steps] == [
        ("charge", "succeeded"), ("route", "succeeded"), ("approve", "succeeded"),
        ("ship", "succeeded"), ("print", "succeeded"), ("mail", "succeeded"),
        ("done", "succeeded"),
    ]  # fmt: skip
    assert steps[2].output == {"by": "ana"}
    assert [(s.key, s.branch, s.parent) for s in steps if s.parent is not None] == [
        ("print", "label", "ship"), ("mail", "mail", "ship"),
    ]  # fmt: skip
    page = await sdk.workflow_steps(run.id, limit=3)
    assert [s.key for s in page.items] == ["charge", "route", "approve"] and page.next_cursor
    assert (await sdk.wait_for_workflow(run.id, timeout=0)) == done


async def test_lists_pause_resume_and_cancel(sdk: AsyncClient, node: Node) -> None:
    await sdk.publish_workflow(order())
    small = await sdk.start_workflow("order", {"amount": 10})
    large = await sdk.start_workflow("order", {"amount": 5000})
    page = await sdk.list_workflows(definition="order", limit=1)
    assert [w.id for w in page.items] == [large.id] and page.next_cursor
    assert page.items[0].steps == []  # list items carry no steps
    assert [w.id async for w in sdk.iter_workflows(state="running")] == [large.id, small.id]
    assert (await sdk.list_workflows(state="succeeded")).items == []
    with pytest.raises(ProtocolError) as bad_state:
        await sdk.list_workflows(state="finished")
    assert bad_state.value.code == "invalid_request"

    paused = await sdk.pause_workflow(small.id, reason="supplier outage")
    assert (paused.state, paused.control_version) == ("paused", 1)
    assert await work(node) == [{"amount": 5000}]  # only the running instance's task is claimable
    with pytest.raises(StateConflictError):
        await sdk.resume_workflow(large.id)
    resumed = await sdk.resume_workflow(small.id)
    assert (resumed.state, resumed.control_version) == ("running", 2)
    with pytest.raises(TimeoutError):
        await sdk.wait_for_workflow(small.id, timeout=0)

    cancelled = await sdk.cancel_workflow(small.id, reason="customer withdrew")
    assert cancelled.state == "cancelled" and cancelled.is_terminal
    assert cancelled.error == WorkflowError(code="cancelled", message="customer withdrew")
    assert (await sdk.cancel_workflow(small.id)).state == "cancelled"
    with pytest.raises(StateConflictError) as conflict:
        await sdk.pause_workflow(small.id)
    assert conflict.value.code == "state_conflict" and conflict.value.status == 409
    with pytest.raises(StateConflictError):
        await sdk.signal_workflow(small.id, "approved")
    with pytest.raises(NotFoundError):
        await sdk.get_workflow("wf_nothing")


async def test_retry_skip_and_resolve_by_step_key(
    sdk: AsyncClient, node: Node, clock: FakeClock
) -> None:
    loop = Workflow("loop", version="1")
    loop.task("count", queue="wf", type="work", output="result.n")
    loop.choice("again", [When("steps.count.output < 2", "count")], default="done")
    loop.succeed("done", output="steps.count.output")
    await sdk.publish_workflow(loop)

    failing = await sdk.start_workflow("loop")
    await work(node, lambda _: {"n": 1})
    await settle(node)
    await work(node, fail=True)
    await settle(node)
    failed = await sdk.get_workflow(failing.id)
    assert failed.state == "failed" and failed.error is not None
    assert (failed.error.code, failed.error.step) == ("boom", "count:2")
    with pytest.raises(NotFoundError):
        await sdk.retry_workflow_step(failing.id, "count:9")
    retried = await sdk.retry_workflow_step(failing.id, "count:2")  # ':' quoted in the path
    assert (retried.state, retried.error, retried.control_version) == ("running", None, 1)
    with pytest.raises(StateConflictError):
        await sdk.retry_workflow_step(failing.id, "count:2")
    await work(node, lambda _: {"n": 2})
    await settle(node)
    assert (await sdk.get_workflow(failing.id)).output == 2

    skipping = await sdk.start_workflow("loop")
    await work(node, lambda _: {"n": 1})
    await settle(node)
    skipped = await sdk.skip_workflow_step(skipping.id, "count:2", 7)
    assert (skipped.state, skipped.output) == ("succeeded", 7)
    assert {s.key: s.state for s in skipped.steps}["count:2"] == "skipped"

    review = Workflow("review", version="1")
    review.map(
        "each", items="input.items", max_concurrency=1,
        task=TaskStep(queue="wf", type="work", side_effect="unsafe"),
    )  # fmt: skip
    await sdk.publish_workflow(review)
    decided = {}
    for outcome in ("succeeded", "failed"):
        run = await sdk.start_workflow("review", {"items": [outcome]})
        [lease] = await node.workers.claim(SCOPE, WORKER, [Want("wf", "work", 1)], limit=1)
        await node.workers.start(lease.ref)
        clock.advance(timedelta(minutes=10))  # the lease ends: the outcome is unknown
        assert await node.workers.expire_leases() == 1
        await settle(node)
        stuck = await sdk.get_workflow(run.id)
        assert stuck.state == "needs_review"
        with pytest.raises(ProtocolError) as missing_error:
            await sdk.resolve_workflow_step(run.id, "each:i0", outcome="failed")
        assert missing_error.value.code == "invalid_request"
        if outcome == "succeeded":
            await sdk.resolve_workflow_step(run.id, "each:i0", outcome="succeeded", output="ok")
        else:
            await sdk.resolve_workflow_step(
                run.id, "each:i0", outcome="failed",
                error=WorkflowError(code="declined", message="the bank said no"),
            )  # fmt: skip
        await settle(node)
        decided[outcome] = await sdk.wait_for_workflow(run.id, timeout=0)
    assert (decided["succeeded"].state, decided["succeeded"].output) == ("succeeded", ["ok"])
    lost = decided["failed"]
    assert lost.state == "failed" and lost.error is not None
    assert (lost.error.code, lost.error.message, lost.error.step, lost.error.cause) == (
        "declined", "the bank said no", "each", "each:i0",
    )  # fmt: skip
    item = [s async for s in sdk.iter_workflow_steps(lost.id) if s.key == "each:i0"]
    assert (item[0].item, item[0].parent, item[0].branch, item[0].type) == (0, "each", None, "task")
    assert item[0].error is not None and item[0].error.code == "declined"


async def test_errors_map_to_the_sdk_classes_with_details(sdk: AsyncClient, node: Node) -> None:
    await sdk.publish_workflow(order())
    changed = order()
    changed.description = "charge and ship"  # other content under version "1"
    with pytest.raises(ConflictError) as exists:
        await sdk.publish_workflow(changed)
    assert type(exists.value) is ConflictError
    assert (exists.value.code, exists.value.category, exists.value.status) == (
        "version_exists", "conflict", 409,
    )  # fmt: skip

    broken = Workflow("broken", version="1")
    broken.task("a", queue="wf", type="work", params="input.", next="nowhere")
    broken.timer("nap", until="input.when")
    with pytest.raises(ProtocolError) as invalid:
        await sdk.publish_workflow(broken)
    assert (invalid.value.code, invalid.value.status) == ("definition_invalid", 422)
    reasons = invalid.value.details["reasons"]
    assert any("next 'nowhere' is not a step of the workflow" in r for r in reasons)
    assert any("'nap' cannot be reached" in r for r in reasons)
    assert any("params" in r for r in reasons)
    with pytest.raises(ProtocolError) as raw:  # a mapping is sent as it is
        await sdk.publish_workflow({"name": "x", "version": "1", "steps": [], "extra": 1})
    assert raw.value.code == "definition_invalid" and raw.value.details["reasons"]

    with pytest.raises(NotFoundError):
        await sdk.start_workflow("missing")
    with pytest.raises(NotFoundError):
        await sdk.get_workflow_definition("order", "9")

    key = await make_key(node, SCOPE, Role.SUBMITTER)
    transport = httpx2.ASGITransport(app=orbit_app(node))
    async with AsyncClient("http://orbit.test", key, transport=transport) as submitter:
        run = await submitter.start_workflow("order", {"amount": 1})
        with pytest.raises(PermissionDeniedError) as denied:
            await submitter.pause_workflow(run.id)  # operators' work; cancelling is not
        assert denied.value.code == "forbidden"
        with pytest.raises(PermissionDeniedError):
            await submitter.publish_workflow(order("2"))
    assert (await sdk.get_workflow(run.id)).state == "running"
