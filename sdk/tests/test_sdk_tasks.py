"""Task and queue calls of Client and AsyncClient over httpx2.MockTransport: what they send
(method, path, body, headers) and how they read the answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import httpx2
import msgspec
import pytest
from fake_orbit import CONFIG, FakeOrbit, call_async, call_sync, ok

import orbit_sdk._tasks as sdk_tasks
from orbit_sdk import (
    AsyncClient,
    Attempt,
    Client,
    IdempotencyConflictError,
    NotFoundError,
    OrbitError,
    Queue,
    RetryPolicy,
    StateConflictError,
    Task,
    TaskError,
    TaskOwner,
    TaskPage,
    TaskRequest,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


# A task object as the server sends it, plus a field this SDK does not know.
TASK = msgspec.json.decode(b"""
{"id": "01m8km788s03n51xj9rye713q5", "queue": "emails", "type": "send-welcome", "state": "pending",
 "params": {"user": 7}, "priority": 0, "run_at": "2026-11-29T12:25:33.305Z", "attempts": 0,
 "max_attempts": 3, "result": null, "error": null, "cancel_requested": false,
 "idempotency_key": null, "concurrency_key": null, "fairness_key": null,
 "side_effect": "idempotent", "labels": {}, "owner": null, "created_at": "2026-11-29T12:24:33.305Z",
 "updated_at": "2026-11-29T12:24:33.305Z", "finished_at": null, "handler_version": null,
 "timeout_ms": 300000, "retry": {"max_attempts": 3, "initial_backoff_ms": 1000,
 "backoff_multiplier": 2.0, "max_backoff_ms": 60000}, "cancel_reason": null,
 "added_by_a_later_server": {"ignored": true}}""")
QUEUE = msgspec.json.decode(b"""
{"name": "emails", "paused": false, "concurrency_limit": null, "key_concurrency": 1,
 "max_pending": null, "counts": {"scheduled": 0, "pending": 0, "leased": 0, "running": 0,
 "succeeded": 0, "failed": 0, "cancelled": 0, "needs_review": 0},
 "oldest_pending_age_ms": null, "workers": 0}""")


def task_json(**fields: Any) -> dict[str, Any]:
    return {**TASK, **fields}


def queue_json(name: str, **fields: Any) -> dict[str, Any]:
    return {**QUEUE, "name": name, **fields}


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``call(fake, "method", *args, **kwargs)`` on a Client or an AsyncClient."""
    return call_sync if request.param == "sync" else call_async


# --- submit --------------------------------------------------------------------------------


def test_submit_sends_only_the_given_fields(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(), 201))

    task = call(fake, "submit", "emails", "send-welcome")

    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/tasks")
    assert fake.body() == {"queue": "emails", "type": "send-welcome"}
    assert fake.last.headers["Content-Type"] == "application/json"
    assert fake.last.headers["Authorization"] == "Bearer test-key"
    assert "traceparent" not in fake.last.headers
    assert isinstance(task, Task) and task.id == "01m8km788s03n51xj9rye713q5"


def test_submit_sends_every_option_by_its_http_name(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(state="scheduled"), 201))
    run_at = datetime(2030, 1, 1, 8, tzinfo=timezone(timedelta(hours=8)))

    call(
        fake,
        "submit",
        "emails",
        "send-welcome",
        {"user": 7},
        priority=5,
        run_at=run_at,
        idempotency_key="welcome-7",
        concurrency_key="user-7",
        fairness_key="shop-3",
        side_effect="unsafe",
        handler_version="v2",
        retry=RetryPolicy(max_attempts=5, max_backoff_ms=120_000),
        timeout_ms=120_000,
        labels={"team": "growth"},
        traceparent=TRACEPARENT,
    )

    assert fake.body() == {
        "queue": "emails",
        "type": "send-welcome",
        "params": {"user": 7},
        "priority": 5,
        "run_at": "2030-01-01T08:00:00+08:00",
        "idempotency_key": "welcome-7",
        "concurrency_key": "user-7",
        "fairness_key": "shop-3",
        "side_effect": "unsafe",
        "handler_version": "v2",
        # Only what differs from Orbit's defaults, which the server treats as the same request.
        "retry": {"max_attempts": 5, "max_backoff_ms": 120000},
        "timeout_ms": 120000,
        "labels": {"team": "growth"},
    }
    assert fake.last.headers["traceparent"] == TRACEPARENT


def test_submit_takes_delay_and_a_run_at_string(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(), 201))

    call(fake, "submit", "q", "t", delay_ms=60_000, params=[1, 2])
    assert fake.body() == {"queue": "q", "type": "t", "params": [1, 2], "delay_ms": 60000}
    call(fake, "submit", "q", "t", run_at="2030-01-01T00:00:00Z", retry=RetryPolicy())
    assert fake.body() == {"queue": "q", "type": "t", "run_at": "2030-01-01T00:00:00Z", "retry": {}}


def test_a_naive_run_at_is_refused_before_sending(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(), 201))

    with pytest.raises(ValueError, match="timezone-aware"):
        call(fake, "submit", "q", "t", run_at=datetime(2030, 1, 1))
    assert fake.requests == []


def test_the_task_decodes_typed() -> None:
    fake = FakeOrbit(
        ok(
            task_json(
                state="failed",
                error={"code": "card_declined", "message": "no", "retryable": False},
                owner={"kind": "workflow", "id": "wf_1", "step": "charge"},
                finished_at="2026-11-29T12:30:00.000Z",
                labels={"team": "growth"},
                cancel_reason="stop",
            )
        )
    )
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        task = client.get_task("t-1")

    assert task.run_at == datetime(2026, 11, 29, 12, 25, 33, 305000, tzinfo=UTC)
    assert task.finished_at == datetime(2026, 11, 29, 12, 30, tzinfo=UTC)
    assert task.error == TaskError(code="card_declined", message="no", retryable=False)
    assert task.owner == TaskOwner(kind="workflow", id="wf_1", step="charge")
    assert task.retry == RetryPolicy()
    assert (task.labels, task.cancel_reason, task.timeout_ms) == (
        {"team": "growth"},
        "stop",
        300000,
    )
    assert task.is_terminal and task.is_settled
    assert not msgspec.json.decode(msgspec.json.encode(task)).get("added_by_a_later_server")


def test_an_answer_of_the_wrong_shape_is_an_unexpected_response(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"id": "t-1"}))

    with pytest.raises(OrbitError) as raised:
        call(fake, "get_task", "t-1")
    assert raised.value.code == "unexpected_response" and raised.value.status == 200
    assert "missing required field" in raised.value.message


def test_errors_arrive_typed(call: Callable[..., Any]) -> None:
    def envelope(code: str, category: str) -> dict[str, Any]:
        return {"error": {"code": code, "category": category, "message": "m", "retryable": False}}

    fake = FakeOrbit(httpx2.Response(409, json=envelope("idempotency_conflict", "conflict")))
    with pytest.raises(IdempotencyConflictError):
        call(fake, "submit", "q", "t", idempotency_key="k")
    fake = FakeOrbit(httpx2.Response(404, json=envelope("not_found", "protocol")))
    with pytest.raises(NotFoundError):
        call(fake, "cancel_task", "nope")
    fake = FakeOrbit(httpx2.Response(409, json=envelope("state_conflict", "conflict")))
    with pytest.raises(StateConflictError):
        call(fake, "retry_task", "t-1")


# --- batch ---------------------------------------------------------------------------------


def test_submit_many_sends_requests_and_mappings_in_order(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"tasks": [task_json(id="a"), task_json(id="b")]}, 201))
    run_at = datetime(2030, 1, 1, tzinfo=UTC)

    tasks = call(
        fake,
        "submit_many",
        [
            TaskRequest(queue="reports", type="build", params={"day": 1}, run_at=run_at),
            {"queue": "reports", "type": "build", "idempotency_key": "report-2"},
        ],
        traceparent=TRACEPARENT,
    )

    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/tasks:batch")
    first = {"queue": "reports", "type": "build", "params": {"day": 1}}
    second = {"queue": "reports", "type": "build", "idempotency_key": "report-2"}
    assert fake.body() == {"tasks": [{**first, "run_at": "2030-01-01T00:00:00Z"}, second]}
    assert fake.last.headers["traceparent"] == TRACEPARENT
    assert [task.id for task in tasks] == ["a", "b"]


@pytest.mark.parametrize("count", [0, 1001])
def test_a_batch_holds_one_to_a_thousand_tasks(call: Callable[..., Any], count: int) -> None:
    fake = FakeOrbit(ok({"tasks": []}))

    with pytest.raises(ValueError, match="1 to 1000"):
        call(fake, "submit_many", [TaskRequest(queue="q", type="t")] * count)
    assert fake.requests == []


# --- reading and waiting -------------------------------------------------------------------


def test_get_task_quotes_the_id(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json()))

    call(fake, "get_task", "a/b?c")

    assert fake.last.method == "GET"
    assert fake.last.url.raw_path == b"/v1/tasks/a%2Fb%3Fc"
    assert fake.last.url.query == b""


def test_wait_for_task_long_polls_until_settled(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(state="running")), ok(task_json(state="needs_review")))

    task = call(fake, "wait_for_task", "t-1", poll_ms=20_000)

    assert task.state == "needs_review"
    assert [r.url.params["wait_ms"] for r in fake.requests] == ["20000", "20000"]
    # The HTTP read timeout covers the time the server may hold the request.
    assert fake.last.extensions["timeout"]["read"] == CONFIG.timeout + 20.0


def test_wait_for_task_returns_a_settled_task_at_once(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(state="succeeded", result={"sent": True})))

    task = call(fake, "wait_for_task", "t-1", timeout=5)

    assert task.result == {"sent": True}
    assert len(fake.requests) == 1
    assert int(fake.last.url.params["wait_ms"]) <= 5000


def test_wait_for_task_raises_timeout_error_past_its_deadline(
    call: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]  # the SDK's clock: moves only while the fake server holds a request
    monkeypatch.setattr(sdk_tasks, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def long_poll(request: httpx2.Request) -> httpx2.Response:
        now[0] += int(request.url.params["wait_ms"]) / 1000  # the server holds the request
        return ok(task_json(state="running"))

    fake = FakeOrbit(long_poll)

    with pytest.raises(TimeoutError, match=r"still running after 0\.06 s"):
        call(fake, "wait_for_task", "t-1", timeout=0.06, poll_ms=25)

    waits = [int(r.url.params["wait_ms"]) for r in fake.requests]
    assert waits == [25, 25, 10]  # the last poll only waits out what is left of the timeout
    assert now[0] == pytest.approx(1000.06)


def test_a_zero_timeout_looks_once(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(state="pending")))

    with pytest.raises(TimeoutError):
        call(fake, "wait_for_task", "t-1", timeout=0)
    assert [r.url.params["wait_ms"] for r in fake.requests] == ["0"]


@pytest.mark.parametrize(
    ("option", "value"), [("poll_ms", 0), ("poll_ms", 60_001), ("timeout", -1)]
)
def test_wait_for_task_checks_its_arguments(
    call: Callable[..., Any], option: str, value: float
) -> None:
    fake = FakeOrbit(ok(task_json()))

    with pytest.raises(ValueError, match=option):
        call(fake, "wait_for_task", "t-1", **{option: value})
    assert fake.requests == []


# --- lists ---------------------------------------------------------------------------------


def test_list_tasks_sends_filters_and_reads_a_page(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"items": [task_json(id="a")], "next_cursor": "c2"}))

    page = call(
        fake,
        "list_tasks",
        queue="emails",
        state="pending",
        type="send",
        label=("team", "growth"),
        limit=10,
        cursor="c1",
    )

    assert (fake.last.method, fake.last.url.path) == ("GET", "/v1/tasks")
    assert dict(fake.last.url.params) == {
        "queue": "emails",
        "state": "pending",
        "type": "send",
        "label": "team:growth",
        "limit": "10",
        "cursor": "c1",
    }
    assert isinstance(page, TaskPage)
    assert ([t.id for t in page.items], page.next_cursor) == (["a"], "c2")
    call(fake, "list_tasks", label="team:growth")
    assert dict(fake.last.url.params) == {"label": "team:growth"}


def pages() -> FakeOrbit:
    return FakeOrbit(
        ok({"items": [task_json(id="a"), task_json(id="b")], "next_cursor": "c1"}),
        ok({"items": [], "next_cursor": "c2"}),  # a short page with a cursor: keep going
        ok({"items": [task_json(id="c")], "next_cursor": None}),
    )


def test_iter_tasks_follows_cursors() -> None:
    fake = pages()
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        tasks: Iterator[Task] = client.iter_tasks(type="send", limit=2)
        assert fake.requests == []  # lazy
        ids = [task.id for task in tasks]

    assert ids == ["a", "b", "c"]
    assert [r.url.params.get("cursor") for r in fake.requests] == [None, "c1", "c2"]
    assert {r.url.params["type"] for r in fake.requests} == {"send"}
    assert {r.url.params["limit"] for r in fake.requests} == {"2"}


async def test_async_iter_tasks_follows_cursors() -> None:
    fake = pages()
    async with AsyncClient.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        ids = [task.id async for task in client.iter_tasks(queue="q", cursor="c0")]

    assert ids == ["a", "b", "c"]
    assert [r.url.params["cursor"] for r in fake.requests] == ["c0", "c1", "c2"]


def test_task_attempts_decodes_each_lease(call: Callable[..., Any]) -> None:
    attempt = {
        "number": 1,
        "state": "needs_review",
        "cause": "lease_expired",
        "worker_id": "w",
        "session_id": "ses_1",
        "node": "n",
        "leased_at": "2026-11-29T12:29:41.440Z",
        "started_at": "2026-11-29T12:29:41.442Z",
        "ended_at": "2026-11-29T12:29:42.824Z",
        "lease_expires_at": None,
        "error": {"code": "outcome_unknown", "message": "lost", "retryable": False},
    }
    fake = FakeOrbit(ok({"items": [attempt], "next_cursor": None}))

    [found] = call(fake, "task_attempts", "t-1")

    assert (fake.last.method, fake.last.url.path) == ("GET", "/v1/tasks/t-1/attempts")
    assert isinstance(found, Attempt)
    assert (found.number, found.cause, found.lease_expires_at) == (1, "lease_expired", None)
    assert found.started_at == datetime(2026, 11, 29, 12, 29, 41, 442000, tzinfo=UTC)
    assert found.error == TaskError(code="outcome_unknown", message="lost")


# --- control -------------------------------------------------------------------------------


def test_cancel_sends_a_body_only_with_a_reason(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(state="cancelled")))

    call(fake, "cancel_task", "t-1")
    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/tasks/t-1/cancel")
    assert fake.last.content == b""
    assert "Content-Type" not in fake.last.headers
    task = call(fake, "cancel_task", "t-1", reason="user left")
    assert fake.body() == {"reason": "user left"}
    assert task.state == "cancelled"


def test_retry_posts_without_a_body(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json()))

    call(fake, "retry_task", "t-1")

    assert (fake.last.method, fake.last.url.path, fake.last.content) == (
        "POST",
        "/v1/tasks/t-1/retry",
        b"",
    )


def test_resolve_sends_the_outcome_and_its_field(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json(state="succeeded")))

    call(fake, "resolve_task", "t-1", outcome="succeeded", result={"charged": True})
    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/tasks/t-1/resolve")
    assert fake.body() == {"outcome": "succeeded", "result": {"charged": True}}
    call(fake, "resolve_task", "t-1", outcome="succeeded")
    assert fake.body() == {"outcome": "succeeded"}
    call(fake, "resolve_task", "t-1", outcome="failed", error=TaskError(code="declined"))
    assert fake.body() == {
        "outcome": "failed",
        "error": {"code": "declined", "message": "", "retryable": False},
    }
    call(fake, "resolve_task", "t-1", outcome="failed", error={"code": "declined"})
    assert fake.body() == {"outcome": "failed", "error": {"code": "declined"}}


# --- queues --------------------------------------------------------------------------------


def test_list_queues_reads_every_page(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(
        ok({"items": [queue_json("a"), queue_json("b")], "next_cursor": "cb"}),
        ok({"items": [queue_json("c", max_pending=2, oldest_pending_age_ms=36)]}),
    )

    queues = call(fake, "list_queues")

    assert [q.name for q in queues] == ["a", "b", "c"]
    assert all(isinstance(q, Queue) for q in queues)
    assert (queues[2].max_pending, queues[2].oldest_pending_age_ms) == (2, 36)
    assert queues[0].counts["needs_review"] == 0
    assert [dict(r.url.params) for r in fake.requests] == [
        {"limit": "500"},
        {"limit": "500", "cursor": "cb"},
    ]


@pytest.mark.parametrize(
    ("options", "body"),
    [
        ({}, {}),
        ({"paused": True, "key_concurrency": 2}, {"paused": True, "key_concurrency": 2}),
        ({"paused": False}, {"paused": False}),
        ({"concurrency_limit": 10, "max_pending": 9}, {"concurrency_limit": 10, "max_pending": 9}),
        ({"concurrency_limit": None}, {"concurrency_limit": None}),
        ({"max_pending": None}, {"max_pending": None}),
        ({"paused": None, "key_concurrency": None}, {}),
    ],
)
def test_update_queue_tells_keep_from_clear(
    call: Callable[..., Any], options: dict[str, Any], body: dict[str, Any]
) -> None:
    fake = FakeOrbit(ok(queue_json("thumb nails")))

    queue = call(fake, "update_queue", "thumb nails", **options)

    assert (fake.last.method, fake.last.url.raw_path) == ("PUT", b"/v1/queues/thumb%20nails")
    assert fake.body() == body
    assert fake.last.headers["Content-Type"] == "application/json"
    assert queue.name == "thumb nails"


def test_empty_ids_are_refused(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(task_json()))

    with pytest.raises(ValueError, match="empty"):
        call(fake, "get_task", "")
    assert fake.requests == []
