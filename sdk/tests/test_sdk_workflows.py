"""Workflow calls of Client and AsyncClient over httpx2.MockTransport: what they send (method,
path, body, query) and how they read the answers."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import httpx2
import msgspec
import pytest
from fake_orbit import CONFIG, FakeOrbit, call_async, call_sync, ok

import orbit_sdk._workflows as sdk_workflows
from orbit_sdk import (
    AsyncClient,
    Client,
    ConflictError,
    IdempotencyConflictError,
    NotFoundError,
    OrbitError,
    PendingSignal,
    PermissionDeniedError,
    ProtocolError,
    StateConflictError,
    Workflow,
    WorkflowDefinition,
    WorkflowDefinitionPage,
    WorkflowError,
    WorkflowInstance,
    WorkflowPage,
    WorkflowSignal,
    WorkflowStep,
    WorkflowStepPage,
    WorkflowWait,
)

BODY = {
    "name": "order",
    "version": "3",
    "format": 1,
    "steps": [{"id": "charge", "kind": "task", "queue": "payments", "type": "charge"}],
}
DEFINITION = {
    "name": "order",
    "version": "3",
    "digest": "9f2c1a0e" * 8,
    "created_at": "2026-12-01T09:00:00.000Z",
    "definition": BODY,
}
SUMMARY = {key: value for key, value in DEFINITION.items() if key != "definition"}

# An instance as the server sends it, plus a field this SDK does not know.
INSTANCE = msgspec.json.decode(b"""
{"id": "wf_01m8kr0a1b", "definition": "order", "version": "3", "state": "running",
 "input": {"order_id": "o-17", "amount": 1200}, "output": null, "error": null,
 "control_version": 0,
 "created_at": "2026-12-01T10:00:00.000Z", "updated_at": "2026-12-01T10:00:01.500Z",
 "finished_at": null,
 "steps": [
   {"step": "charge", "key": "charge", "type": "task", "state": "succeeded",
    "task_id": "01m8kr0a2c", "round": null, "item": null, "branch": null, "parent": null,
    "output": {"receipt": "r-1"},
    "error": null, "started_at": "2026-12-01T10:00:00.010Z",
    "ended_at": "2026-12-01T10:00:01.200Z"},
   {"step": "approve", "key": "approve", "type": "signal", "state": "waiting",
    "task_id": null, "round": null, "item": null, "branch": null, "parent": null,
    "output": null, "error": null,
    "started_at": "2026-12-01T10:00:01.210Z", "ended_at": null}],
 "waits": [{"key": "approve", "step": "approve", "kind": "signal",
            "until": "2026-12-02T10:00:01.210Z", "signal": "approved"}],
 "pending_signals": [{"id": "sig_01m8kr0a3d", "name": "note",
                      "created_at": "2026-12-01T10:00:00.500Z"}],
 "added_by_a_later_server": {"ignored": true}}""")
# Item 17 of the map step "resize".
STEP = {
    "step": "resize",
    "key": "resize:i17",
    "type": "task",
    "state": "failed",
    "task_id": "01m8kr0b4e",
    "round": None,
    "item": 17,
    "branch": None,
    "parent": "resize",
    "output": None,
    "error": {"code": "too_big", "message": "image over 50 MB"},
    "started_at": "2026-12-01T10:05:00.000Z",
    "ended_at": "2026-12-01T10:05:02.000Z",
}
SIGNAL = {
    "id": "sig_01m8kr0c5f",
    "name": "approved",
    "state": "delivered",
    "step": "approve",
    "created_at": "2026-12-01T10:10:00.000Z",
}


def instance_json(**fields: Any) -> dict[str, Any]:
    return {**INSTANCE, **fields}


def listed(**fields: Any) -> dict[str, Any]:
    """An instance as list items have it: no steps, waits or pending signals."""
    item = instance_json(**fields)
    for key in ("steps", "waits", "pending_signals"):
        del item[key]
    return item


def failure(status: int, code: str, category: str, **extra: Any) -> httpx2.Response:
    error = {"code": code, "category": category, "message": "m", "retryable": False, **extra}
    return httpx2.Response(status, json={"error": error})


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``call(fake, "method", *args, **kwargs)`` on a Client or an AsyncClient."""
    return call_sync if request.param == "sync" else call_async


WORKFLOW_METHODS = [
    "publish_workflow",
    "get_workflow_definition",
    "list_workflow_definitions",
    "iter_workflow_definitions",
    "start_workflow",
    "get_workflow",
    "wait_for_workflow",
    "list_workflows",
    "iter_workflows",
    "workflow_steps",
    "iter_workflow_steps",
    "signal_workflow",
    "pause_workflow",
    "resume_workflow",
    "cancel_workflow",
    "retry_workflow_step",
    "skip_workflow_step",
    "resolve_workflow_step",
]


@pytest.mark.parametrize("name", WORKFLOW_METHODS)
def test_both_clients_take_the_same_arguments(name: str) -> None:
    sync, async_ = getattr(Client, name), getattr(AsyncClient, name)

    assert inspect.signature(sync).parameters == inspect.signature(async_).parameters
    assert inspect.iscoroutinefunction(async_) or inspect.isasyncgenfunction(async_)


# --- definitions ---------------------------------------------------------------------------


def test_publish_sends_the_builders_definition(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(DEFINITION, 201))
    wf = Workflow("order", version="3").task("charge", queue="payments", type="charge")

    published = call(fake, "publish_workflow", wf)

    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/workflow-definitions")
    assert fake.last.headers["Content-Type"] == "application/json"
    assert fake.body() == BODY == wf.to_dict()
    assert published == WorkflowDefinition(
        name="order",
        version="3",
        digest="9f2c1a0e" * 8,
        created_at=datetime(2026, 12, 1, 9, tzinfo=UTC),
        definition=BODY,
    )


def test_publish_sends_a_mapping_as_it_is(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(DEFINITION, 200))  # the same content again: answered 200
    body = {**BODY, "description": "from a file"}

    published = call(fake, "publish_workflow", body)

    assert fake.body() == body
    assert published.version == "3"


def test_version_exists_is_a_conflict(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(failure(409, "version_exists", "conflict"))

    with pytest.raises(ConflictError) as raised:
        call(fake, "publish_workflow", BODY)
    assert type(raised.value) is ConflictError
    assert (raised.value.status, raised.value.code) == (409, "version_exists")


def test_definition_invalid_carries_its_reasons(call: Callable[..., Any]) -> None:
    reasons = ["step 'route': next 'nowhere' names no step of its list", "step 'x' is unreachable"]
    fake = FakeOrbit(failure(422, "definition_invalid", "protocol", details={"reasons": reasons}))

    with pytest.raises(ProtocolError) as raised:
        call(fake, "publish_workflow", BODY)
    assert type(raised.value) is ProtocolError
    assert (raised.value.status, raised.value.code) == (422, "definition_invalid")
    assert raised.value.details == {"reasons": reasons}


def test_get_workflow_definition_quotes_name_and_version(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(DEFINITION))

    definition = call(fake, "get_workflow_definition", "orders/eu", "3 beta")

    assert (fake.last.method, fake.last.url.raw_path) == (
        "GET",
        b"/v1/workflow-definitions/orders%2Feu/versions/3%20beta",
    )
    assert definition.definition == BODY


def test_list_workflow_definitions_reads_a_page_without_definitions(
    call: Callable[..., Any],
) -> None:
    fake = FakeOrbit(ok({"items": [SUMMARY, {**SUMMARY, "version": "2"}], "next_cursor": "d2"}))

    page = call(fake, "list_workflow_definitions", name="order", limit=2, cursor="d1")

    assert (fake.last.method, fake.last.url.path) == ("GET", "/v1/workflow-definitions")
    assert dict(fake.last.url.params) == {"name": "order", "limit": "2", "cursor": "d1"}
    assert isinstance(page, WorkflowDefinitionPage)
    assert [(d.version, d.definition) for d in page.items] == [("3", None), ("2", None)]
    assert page.next_cursor == "d2"
    call(fake, "list_workflow_definitions")
    assert fake.last.url.query == b""


def definition_pages() -> FakeOrbit:
    return FakeOrbit(
        ok({"items": [{**SUMMARY, "version": "1"}], "next_cursor": "c1"}),
        ok({"items": [], "next_cursor": "c2"}),  # an empty page with a cursor: keep going
        ok({"items": [{**SUMMARY, "version": "2"}], "next_cursor": None}),
    )


def test_iter_workflow_definitions_follows_cursors() -> None:
    fake = definition_pages()
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        definitions: Iterator[WorkflowDefinition] = client.iter_workflow_definitions(name="order")
        assert fake.requests == []  # lazy
        versions = [definition.version for definition in definitions]

    assert versions == ["1", "2"]
    assert [r.url.params.get("cursor") for r in fake.requests] == [None, "c1", "c2"]
    assert {r.url.params["name"] for r in fake.requests} == {"order"}


async def test_async_iter_workflow_definitions_follows_cursors() -> None:
    fake = definition_pages()
    async with AsyncClient.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        versions = [d.version async for d in client.iter_workflow_definitions(limit=1)]

    assert versions == ["1", "2"]
    assert [r.url.params.get("cursor") for r in fake.requests] == [None, "c1", "c2"]
    assert {r.url.params["limit"] for r in fake.requests} == {"1"}


# --- start and read ------------------------------------------------------------------------


def test_start_sends_only_the_given_fields(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(INSTANCE, 201))

    instance = call(fake, "start_workflow", "order")

    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/workflows")
    assert fake.body() == {"definition": "order"}
    assert isinstance(instance, WorkflowInstance) and instance.id == "wf_01m8kr0a1b"


def test_start_sends_input_version_and_idempotency_key(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(INSTANCE, 200))  # a replay of the same key and request

    call(
        fake,
        "start_workflow",
        "order",
        {"order_id": "o-17", "amount": 1200},
        version="3",
        idempotency_key="order-o-17",
    )

    assert fake.body() == {
        "definition": "order",
        "version": "3",
        "input": {"order_id": "o-17", "amount": 1200},
        "idempotency_key": "order-o-17",
    }


def test_a_reused_idempotency_key_is_an_idempotency_conflict(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(failure(409, "idempotency_conflict", "conflict"))

    with pytest.raises(IdempotencyConflictError):
        call(fake, "start_workflow", "order", {"order_id": "o-18"}, idempotency_key="order-o-17")


def test_the_instance_decodes_typed() -> None:
    fake = FakeOrbit(ok(INSTANCE))
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        instance = client.get_workflow("wf_01m8kr0a1b")

    assert (instance.definition, instance.version, instance.state) == ("order", "3", "running")
    assert instance.input == {"order_id": "o-17", "amount": 1200}
    assert (instance.output, instance.error, instance.finished_at) == (None, None, None)
    assert instance.control_version == 0 and not instance.is_terminal
    assert instance.created_at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert instance.steps[0] == WorkflowStep(
        step="charge",
        key="charge",
        type="task",
        state="succeeded",
        task_id="01m8kr0a2c",
        output={"receipt": "r-1"},
        started_at=datetime(2026, 12, 1, 10, 0, 0, 10000, tzinfo=UTC),
        ended_at=datetime(2026, 12, 1, 10, 0, 1, 200000, tzinfo=UTC),
    )
    assert [(s.key, s.state, s.ended_at) for s in instance.steps[1:]] == [
        ("approve", "waiting", None)
    ]
    assert instance.waits == [
        WorkflowWait(
            key="approve",
            step="approve",
            kind="signal",
            until=datetime(2026, 12, 2, 10, 0, 1, 210000, tzinfo=UTC),
            signal="approved",
        )
    ]
    assert instance.pending_signals == [
        PendingSignal(
            id="sig_01m8kr0a3d",
            name="note",
            created_at=datetime(2026, 12, 1, 10, 0, 0, 500000, tzinfo=UTC),
        )
    ]
    assert not msgspec.json.decode(msgspec.json.encode(instance)).get("added_by_a_later_server")


def test_a_failed_instance_names_its_error_and_step(call: Callable[..., Any]) -> None:
    error = {"code": "refunded", "message": "payment refunded", "step": "refund"}
    fake = FakeOrbit(
        ok(instance_json(state="failed", error=error, finished_at="2026-12-01T11:00:00.000Z"))
    )

    instance = call(fake, "get_workflow", "wf_01m8kr0a1b")

    assert instance.is_terminal
    assert instance.error == WorkflowError(
        code="refunded", message="payment refunded", step="refund"
    )
    assert instance.finished_at == datetime(2026, 12, 1, 11, tzinfo=UTC)


def test_get_workflow_quotes_the_id(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(INSTANCE))

    call(fake, "get_workflow", "a/b?c")

    assert (fake.last.method, fake.last.url.raw_path) == ("GET", b"/v1/workflows/a%2Fb%3Fc")
    assert fake.last.url.query == b""


# --- waiting -------------------------------------------------------------------------------


def test_wait_long_polls_until_terminal(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(
        ok(instance_json(state="running")),
        ok(instance_json(state="needs_review")),  # not finished: an operator may still act
        ok(instance_json(state="paused")),
        ok(instance_json(state="succeeded", output={"shipped": True})),
    )

    instance = call(fake, "wait_for_workflow", "wf_01m8kr0a1b", poll_ms=20_000)

    assert (instance.state, instance.output) == ("succeeded", {"shipped": True})
    assert [r.url.path for r in fake.requests] == ["/v1/workflows/wf_01m8kr0a1b"] * 4
    assert [r.url.params["wait_ms"] for r in fake.requests] == ["20000"] * 4
    # The HTTP read timeout covers the time the server may hold the request.
    assert fake.last.extensions["timeout"]["read"] == CONFIG.timeout + 20.0


@pytest.mark.parametrize("timeout", [5, 5.0, timedelta(seconds=5)])
def test_wait_returns_a_terminal_instance_at_once(
    call: Callable[..., Any], timeout: float | timedelta
) -> None:
    fake = FakeOrbit(ok(instance_json(state="cancelled")))

    instance = call(fake, "wait_for_workflow", "wf_01m8kr0a1b", timeout=timeout)

    assert instance.state == "cancelled"
    assert len(fake.requests) == 1
    assert 4000 < int(fake.last.url.params["wait_ms"]) <= 5000


def test_wait_raises_timeout_error_past_its_deadline(
    call: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]  # the SDK's clock: moves only while the fake server holds a request
    monkeypatch.setattr(sdk_workflows, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def long_poll(request: httpx2.Request) -> httpx2.Response:
        now[0] += int(request.url.params["wait_ms"]) / 1000  # the server holds the request
        return ok(instance_json(state="running"))

    fake = FakeOrbit(long_poll)

    with pytest.raises(TimeoutError, match=r"wf_01m8kr0a1b is still running after 0\.06 s"):
        call(
            fake,
            "wait_for_workflow",
            "wf_01m8kr0a1b",
            timeout=timedelta(milliseconds=60),
            poll_ms=25,
        )

    waits = [int(r.url.params["wait_ms"]) for r in fake.requests]
    assert waits == [25, 25, 10]  # the last poll only waits out what is left of the timeout
    assert now[0] == pytest.approx(1000.06)


def test_a_zero_timeout_looks_once(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(instance_json(state="paused")))

    with pytest.raises(TimeoutError, match="still paused"):
        call(fake, "wait_for_workflow", "wf_01m8kr0a1b", timeout=0)
    assert [r.url.params["wait_ms"] for r in fake.requests] == ["0"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("poll_ms", 0),
        ("poll_ms", 60_001),
        ("timeout", -1),
        ("timeout", timedelta(seconds=-1)),
        ("timeout", float("nan")),
    ],
)
def test_wait_checks_its_arguments(call: Callable[..., Any], option: str, value: Any) -> None:
    fake = FakeOrbit(ok(INSTANCE))

    with pytest.raises(ValueError, match=option):
        call(fake, "wait_for_workflow", "wf_01m8kr0a1b", **{option: value})
    assert fake.requests == []


# --- lists ---------------------------------------------------------------------------------


def test_list_workflows_sends_filters_and_reads_items_without_details(
    call: Callable[..., Any],
) -> None:
    fake = FakeOrbit(ok({"items": [listed(), listed(id="wf_2")], "next_cursor": "w2"}))

    page = call(fake, "list_workflows", definition="order", state="running", limit=2, cursor="w1")

    assert (fake.last.method, fake.last.url.path) == ("GET", "/v1/workflows")
    assert dict(fake.last.url.params) == {
        "definition": "order",
        "state": "running",
        "limit": "2",
        "cursor": "w1",
    }
    assert isinstance(page, WorkflowPage)
    assert [w.id for w in page.items] == ["wf_01m8kr0a1b", "wf_2"]
    assert (page.items[0].steps, page.items[0].waits, page.items[0].pending_signals) == ([], [], [])
    assert page.next_cursor == "w2"
    call(fake, "list_workflows")
    assert fake.last.url.query == b""


def workflow_pages() -> FakeOrbit:
    return FakeOrbit(
        ok({"items": [listed(id="a"), listed(id="b")], "next_cursor": "c1"}),
        ok({"items": [listed(id="c")], "next_cursor": None}),
    )


def test_iter_workflows_follows_cursors() -> None:
    fake = workflow_pages()
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        ids = [w.id for w in client.iter_workflows(state="failed", limit=2)]

    assert ids == ["a", "b", "c"]
    assert [r.url.params.get("cursor") for r in fake.requests] == [None, "c1"]
    assert {(r.url.params["state"], r.url.params["limit"]) for r in fake.requests} == {
        ("failed", "2")
    }


async def test_async_iter_workflows_follows_cursors() -> None:
    fake = workflow_pages()
    async with AsyncClient.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        ids = [w.id async for w in client.iter_workflows(definition="order", cursor="c0")]

    assert ids == ["a", "b", "c"]
    assert [r.url.params["cursor"] for r in fake.requests] == ["c0", "c1"]


def test_workflow_steps_reads_a_page_of_executions(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"items": [STEP], "next_cursor": "s2"}))

    page = call(fake, "workflow_steps", "wf_01m8kr0a1b", limit=1, cursor="s1")

    assert (fake.last.method, fake.last.url.path) == ("GET", "/v1/workflows/wf_01m8kr0a1b/steps")
    assert dict(fake.last.url.params) == {"limit": "1", "cursor": "s1"}
    assert isinstance(page, WorkflowStepPage) and page.next_cursor == "s2"
    [step] = page.items
    assert (step.step, step.key, step.type, step.state) == (
        "resize", "resize:i17", "task", "failed",
    )  # fmt: skip
    assert (step.item, step.round, step.task_id) == (17, None, "01m8kr0b4e")
    assert (step.branch, step.parent) == (None, "resize")
    assert step.error == WorkflowError(code="too_big", message="image over 50 MB")


def test_a_step_names_its_branch_and_parent() -> None:
    """A step of a parallel branch names the branch and the parallel execution; a step the
    server sends without the two fields (an older server) reads them as None."""
    in_branch = {**STEP, "step": "print", "key": "print", "item": None, "branch": "label",
                 "parent": "ship"}  # fmt: skip
    older = {key: value for key, value in STEP.items() if key not in ("branch", "parent")}
    fake = FakeOrbit(ok({"items": [in_branch, older], "next_cursor": None}))
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        first, second = client.workflow_steps("wf_01m8kr0a1b").items

    assert (first.key, first.branch, first.parent) == ("print", "label", "ship")
    assert (second.key, second.branch, second.parent) == ("resize:i17", None, None)
    assert WorkflowStep(step="a", key="a", type="task", state="pending").branch is None


def step_pages() -> FakeOrbit:
    poll = {**STEP, "step": "check", "item": None, "parent": "check"}
    return FakeOrbit(
        ok({"items": [{**poll, "key": "check:r1", "round": 1}], "next_cursor": "s1"}),
        ok({"items": [{**poll, "key": "check:r2", "round": 2}], "next_cursor": None}),
    )


def test_iter_workflow_steps_follows_cursors() -> None:
    fake = step_pages()
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        keys = [s.key for s in client.iter_workflow_steps("wf_01m8kr0a1b", limit=1)]

    assert keys == ["check:r1", "check:r2"]
    assert [r.url.params.get("cursor") for r in fake.requests] == [None, "s1"]


async def test_async_iter_workflow_steps_follows_cursors() -> None:
    fake = step_pages()
    async with AsyncClient.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        rounds = [s.round async for s in client.iter_workflow_steps("wf_01m8kr0a1b")]

    assert rounds == [1, 2]


# --- signals -------------------------------------------------------------------------------


def test_signal_sends_the_name_payload_and_key(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(SIGNAL, 202))

    signal = call(
        fake,
        "signal_workflow",
        "wf_01m8kr0a1b",
        "approved",
        {"by": "ana"},
        idempotency_key="approval-o-17",
    )

    assert (fake.last.method, fake.last.url.path) == (
        "POST",
        "/v1/workflows/wf_01m8kr0a1b/signals",
    )
    assert fake.body() == {
        "name": "approved",
        "payload": {"by": "ana"},
        "idempotency_key": "approval-o-17",
    }
    assert signal == WorkflowSignal(
        id="sig_01m8kr0c5f",
        name="approved",
        state="delivered",
        step="approve",
        created_at=datetime(2026, 12, 1, 10, 10, tzinfo=UTC),
    )


def test_a_signal_without_payload_sends_only_its_name(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({**SIGNAL, "state": "pending", "step": None}, 202))

    signal = call(fake, "signal_workflow", "wf_01m8kr0a1b", "note")

    assert fake.body() == {"name": "note"}
    assert (signal.state, signal.step) == ("pending", None)


# --- pause, resume, cancel -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "action"),
    [("pause_workflow", "pause"), ("resume_workflow", "resume"), ("cancel_workflow", "cancel")],
)
def test_controls_send_an_object_with_an_optional_reason(
    call: Callable[..., Any], method: str, action: str
) -> None:
    fake = FakeOrbit(ok(instance_json(state="paused", control_version=1)))

    instance = call(fake, method, "wf_01m8kr0a1b")
    assert (fake.last.method, fake.last.url.path) == (
        "POST",
        f"/v1/workflows/wf_01m8kr0a1b/{action}",
    )
    assert fake.body() == {}
    assert fake.last.headers["Content-Type"] == "application/json"
    assert (instance.state, instance.control_version) == ("paused", 1)

    call(fake, method, "wf_01m8kr0a1b", reason="supplier outage")
    assert fake.body() == {"reason": "supplier outage"}
    call(fake, method, "wf_01m8kr0a1b", "supplier outage")  # positional too
    assert fake.body() == {"reason": "supplier outage"}


# --- recovery ------------------------------------------------------------------------------


def test_retry_step_quotes_the_key(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(INSTANCE))

    instance = call(fake, "retry_workflow_step", "wf_01m8kr0a1b", "resize:i17")

    assert (fake.last.method, fake.last.url.raw_path) == (
        "POST",
        b"/v1/workflows/wf_01m8kr0a1b/steps/resize%3Ai17/retry",
    )
    assert fake.body() == {}
    assert instance.state == "running"


def test_skip_step_always_sends_the_output(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(INSTANCE))

    call(fake, "skip_workflow_step", "wf_01m8kr0a1b", "charge:2")
    assert fake.last.url.raw_path == b"/v1/workflows/wf_01m8kr0a1b/steps/charge%3A2/skip"
    assert fake.body() == {"output": None}
    call(fake, "skip_workflow_step", "wf_01m8kr0a1b", "charge", {"receipt": "manual"})
    assert fake.body() == {"output": {"receipt": "manual"}}


@pytest.mark.parametrize(
    ("options", "body"),
    [
        ({"outcome": "succeeded"}, {"outcome": "succeeded", "output": None}),
        (
            {"outcome": "succeeded", "output": {"receipt": "r-9"}},
            {"outcome": "succeeded", "output": {"receipt": "r-9"}},
        ),
        (
            {"outcome": "failed", "error": WorkflowError(code="declined", message="card")},
            {"outcome": "failed", "error": {"code": "declined", "message": "card"}},
        ),
        (
            {"outcome": "failed", "error": {"code": "declined", "message": "card"}},
            {"outcome": "failed", "error": {"code": "declined", "message": "card"}},
        ),
        ({"outcome": "failed"}, {"outcome": "failed"}),  # Orbit says what is missing
    ],
)
def test_resolve_step_sends_the_outcome_and_its_field(
    call: Callable[..., Any], options: dict[str, Any], body: dict[str, Any]
) -> None:
    fake = FakeOrbit(ok(INSTANCE))

    call(fake, "resolve_workflow_step", "wf_01m8kr0a1b", "charge", **options)

    assert (fake.last.method, fake.last.url.path) == (
        "POST",
        "/v1/workflows/wf_01m8kr0a1b/steps/charge/resolve",
    )
    assert fake.body() == body


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "method", "args", "error"),
    [
        ((404, "not_found", "protocol"), "get_workflow", ("nope",), NotFoundError),
        ((404, "not_found", "protocol"), "get_workflow_definition", ("o", "9"), NotFoundError),
        ((404, "not_found", "protocol"), "start_workflow", ("nope",), NotFoundError),
        ((409, "state_conflict", "conflict"), "resume_workflow", ("w",), StateConflictError),
        (
            (409, "state_conflict", "conflict"),
            "retry_workflow_step",
            ("w", "k"),
            StateConflictError,
        ),
        ((409, "state_conflict", "conflict"), "signal_workflow", ("w", "s"), StateConflictError),
        ((403, "forbidden", "permission"), "pause_workflow", ("w",), PermissionDeniedError),
    ],
)
def test_errors_arrive_typed(
    call: Callable[..., Any],
    answer: tuple[int, str, str],
    method: str,
    args: tuple[Any, ...],
    error: type[OrbitError],
) -> None:
    with pytest.raises(error) as raised:
        call(FakeOrbit(failure(*answer)), method, *args)
    assert type(raised.value) is error  # the closest class, not only a base of it
    assert (raised.value.status, raised.value.code) == answer[:2]
    assert raised.value.details == {}


def test_details_of_an_unexpected_shape_do_not_hide_the_error(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(failure(422, "definition_invalid", "protocol", details=["a reason"]))

    with pytest.raises(ProtocolError) as raised:
        call(fake, "publish_workflow", BODY)
    assert raised.value.code == "definition_invalid" and raised.value.details == {}


def test_an_answer_of_the_wrong_shape_is_an_unexpected_response(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"id": "wf_01m8kr0a1b"}))

    with pytest.raises(OrbitError) as raised:
        call(fake, "get_workflow", "wf_01m8kr0a1b")
    assert raised.value.code == "unexpected_response" and raised.value.status == 200
    assert "missing required field" in raised.value.message


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("get_workflow", ("",)),
        ("get_workflow_definition", ("order", "")),
        ("pause_workflow", ("",)),
        ("retry_workflow_step", ("w", "")),
        ("workflow_steps", ("",)),
    ],
)
def test_empty_ids_and_keys_are_refused(
    call: Callable[..., Any], method: str, args: tuple[str, ...]
) -> None:
    fake = FakeOrbit(ok(INSTANCE))

    with pytest.raises(ValueError, match="empty"):
        call(fake, method, *args)
    assert fake.requests == []
