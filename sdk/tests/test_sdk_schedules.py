"""Schedule calls of Client and AsyncClient over httpx2.MockTransport: what they send (method,
path, body, query) and how they read the answers."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx2
import msgspec
import pytest
from fake_orbit import CONFIG, FakeOrbit, call_async, call_sync, ok

from orbit_sdk import (
    AsyncClient,
    Backfill,
    Client,
    ConflictError,
    FirePage,
    NotFoundError,
    OrbitError,
    PermissionDeniedError,
    ProtocolError,
    RetryPolicy,
    Schedule,
    ScheduleFire,
    SchedulePage,
    ScheduleTask,
    StateConflictError,
    TaskRequest,
)

# A schedule as the server sends it, plus a field this SDK does not know.
SCHEDULE = msgspec.json.decode(b"""
{"name": "nightly-report", "id": "sch_01m8kq2c3d", "version": 1,
 "cron": "0 2 * * *", "timezone": "Asia/Shanghai", "interval_ms": null,
 "task": {"queue": "reports", "type": "build", "params": {}, "priority": 0,
          "retry": null, "timeout_ms": null, "concurrency_key": null, "fairness_key": null,
          "side_effect": "idempotent", "handler_version": null, "labels": {}},
 "catchup": "latest", "catchup_max": 10, "overlap": "skip",
 "start_at": null, "end_at": null, "paused": false, "paused_reason": null,
 "next_fire_at": "2026-12-01T18:00:00.000Z", "last_fire_at": "2026-11-30T18:00:00.000Z",
 "last_task_id": "01m8kq9x0a", "queued_fire_at": null,
 "recent": [{"fire_time": "2026-11-30T18:00:00.000Z", "task_id": "01m8kq9x0a",
             "outcome": "fired", "cause": "schedule", "recorded_at": "2026-11-30T18:00:00.012Z"},
            {"fire_time": "2026-11-29T18:00:00.000Z", "task_id": null,
             "outcome": "missed", "cause": "schedule", "recorded_at": "2026-11-29T18:05:10.400Z"}],
 "created_at": "2026-11-29T12:00:00.000Z", "updated_at": "2026-11-29T12:00:00.000Z",
 "added_by_a_later_server": {"ignored": true}}""")
FIRE = {
    "fire_time": "2026-11-30T09:15:02.118Z",
    "task_id": "01m8kqa2vb",
    "outcome": "fired",
    "cause": "trigger",
    "recorded_at": "2026-11-30T09:15:02.118Z",
}
BACKFILL = {
    "id": "bkf_01m8kqb7",
    "schedule": "nightly-report",
    "from": "2026-11-01T00:00:00.000Z",
    "to": "2026-11-08T00:00:00.000Z",
    "state": "running",
    "cursor": None,
    "fired": 0,
    "existing": 0,
    "created_at": "2026-11-30T09:20:00.000Z",
    "finished_at": None,
}


def schedule_json(**fields: Any) -> dict[str, Any]:
    return {**SCHEDULE, **fields}


def failure(status: int, code: str, category: str) -> httpx2.Response:
    error = {"code": code, "category": category, "message": "m", "retryable": False}
    return httpx2.Response(status, json={"error": error})


NOT_FOUND = (404, "not_found", "protocol")


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``call(fake, "method", *args, **kwargs)`` on a Client or an AsyncClient."""
    return call_sync if request.param == "sync" else call_async


SCHEDULE_METHODS = [
    "create_schedule",
    "get_schedule",
    "list_schedules",
    "iter_schedules",
    "update_schedule",
    "delete_schedule",
    "pause_schedule",
    "resume_schedule",
    "trigger_schedule",
    "backfill_schedule",
    "get_backfill",
    "list_backfills",
    "schedule_fires",
]


@pytest.mark.parametrize("name", SCHEDULE_METHODS)
def test_both_clients_take_the_same_arguments(name: str) -> None:
    sync, async_ = getattr(Client, name), getattr(AsyncClient, name)

    assert inspect.signature(sync).parameters == inspect.signature(async_).parameters
    assert inspect.iscoroutinefunction(async_) or inspect.isasyncgenfunction(async_)


# --- create --------------------------------------------------------------------------------


def test_create_sends_the_name_the_task_and_only_the_given_fields(
    call: Callable[..., Any],
) -> None:
    fake = FakeOrbit(ok(SCHEDULE, 201))

    schedule = call(
        fake,
        "create_schedule",
        "nightly-report",
        task=ScheduleTask(queue="reports", type="build"),
        cron="0 2 * * *",
    )

    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/schedules")
    assert fake.body() == {
        "name": "nightly-report",
        "task": {"queue": "reports", "type": "build"},
        "cron": "0 2 * * *",
    }
    assert fake.last.headers["Content-Type"] == "application/json"
    assert fake.last.headers["Authorization"] == "Bearer test-key"
    assert isinstance(schedule, Schedule) and schedule.id == "sch_01m8kq2c3d"


def test_create_sends_every_option_by_its_http_name(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(schedule_json(paused=True), 201))
    start_at = datetime(2027, 1, 1, 8, tzinfo=timezone(timedelta(hours=8)))

    call(
        fake,
        "create_schedule",
        "sync:crm",
        task=ScheduleTask(
            queue="crm",
            type="sync",
            params={"full": False},
            priority=3,
            retry=RetryPolicy(max_attempts=5),
            timeout_ms=60_000,
            concurrency_key="crm",
            fairness_key="tenant-1",
            side_effect="unsafe",
            handler_version="v2",
            labels={"team": "data"},
        ),
        interval_ms=300_000,
        catchup="all",
        catchup_max=20,
        overlap="queue_one",
        start_at=start_at,
        end_at="2027-12-31T00:00:00Z",
        paused=True,
    )

    assert fake.body() == {
        "name": "sync:crm",
        "task": {
            "queue": "crm",
            "type": "sync",
            "params": {"full": False},
            "priority": 3,
            "retry": {"max_attempts": 5},  # only what differs from Orbit's defaults
            "timeout_ms": 60000,
            "concurrency_key": "crm",
            "fairness_key": "tenant-1",
            "side_effect": "unsafe",
            "handler_version": "v2",
            "labels": {"team": "data"},
        },
        "interval_ms": 300000,
        "catchup": "all",
        "catchup_max": 20,
        "overlap": "queue_one",
        "start_at": "2027-01-01T08:00:00+08:00",
        "end_at": "2027-12-31T00:00:00Z",
        "paused": True,
    }


def test_create_takes_a_task_request_or_a_mapping_as_the_template(
    call: Callable[..., Any],
) -> None:
    fake = FakeOrbit(ok(SCHEDULE, 201))

    request = TaskRequest(queue="reports", type="build", params={"day": "today"}, priority=1)
    call(fake, "create_schedule", "a", task=request, cron="* * * * *", timezone="Europe/Berlin")
    assert fake.body() == {
        "name": "a",
        "task": {"queue": "reports", "type": "build", "params": {"day": "today"}, "priority": 1},
        "cron": "* * * * *",
        "timezone": "Europe/Berlin",
    }
    call(fake, "create_schedule", "b", task={"queue": "q", "type": "t"}, interval_ms=1000)
    assert fake.body() == {"name": "b", "task": {"queue": "q", "type": "t"}, "interval_ms": 1000}


@pytest.mark.parametrize(
    ("request_fields", "named"),
    [
        ({"idempotency_key": "k"}, "idempotency_key"),
        ({"run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "run_at"),
        ({"delay_ms": 5000}, "delay_ms"),
    ],
)
def test_a_task_request_with_an_identity_or_a_time_is_no_template(
    call: Callable[..., Any], request_fields: dict[str, Any], named: str
) -> None:
    fake = FakeOrbit(ok(SCHEDULE, 201))
    request = TaskRequest(queue="q", type="t", **request_fields)

    with pytest.raises(ValueError, match=f"cannot have {named}"):
        call(fake, "create_schedule", "s", task=request, cron="* * * * *")
    assert fake.requests == []


@pytest.mark.parametrize("bound", ["start_at", "end_at"])
def test_naive_bounds_are_refused_before_sending(call: Callable[..., Any], bound: str) -> None:
    fake = FakeOrbit(ok(SCHEDULE))
    task = ScheduleTask(queue="q", type="t")

    with pytest.raises(ValueError, match=f"{bound} must be timezone-aware"):
        call(
            fake,
            "create_schedule",
            "s",
            task=task,
            cron="* * * * *",
            **{bound: datetime(2030, 1, 1)},
        )
    with pytest.raises(ValueError, match=f"{bound} must be timezone-aware"):
        call(fake, "update_schedule", "s", **{bound: datetime(2030, 1, 1)})
    assert fake.requests == []


# --- read ----------------------------------------------------------------------------------


def test_the_schedule_decodes_typed() -> None:
    fake = FakeOrbit(ok(schedule_json(end_at="2027-01-01T00:00:00.000Z")))
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        schedule = client.get_schedule("nightly-report")

    assert (schedule.name, schedule.version, schedule.cron, schedule.timezone) == (
        "nightly-report",
        1,
        "0 2 * * *",
        "Asia/Shanghai",
    )
    assert schedule.interval_ms is None and schedule.start_at is None
    assert schedule.end_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert schedule.task == ScheduleTask(
        queue="reports",
        type="build",
        params={},
        priority=0,
        side_effect="idempotent",
        labels={},
    )
    assert (schedule.catchup, schedule.catchup_max, schedule.overlap) == ("latest", 10, "skip")
    assert schedule.next_fire_at == datetime(2026, 12, 1, 18, tzinfo=UTC)
    assert schedule.last_task_id == "01m8kq9x0a"
    assert schedule.recent == [
        ScheduleFire(
            fire_time=datetime(2026, 11, 30, 18, tzinfo=UTC),
            task_id="01m8kq9x0a",
            outcome="fired",
            cause="schedule",
            recorded_at=datetime(2026, 11, 30, 18, 0, 0, 12000, tzinfo=UTC),
        ),
        ScheduleFire(
            fire_time=datetime(2026, 11, 29, 18, tzinfo=UTC),
            task_id=None,
            outcome="missed",
            cause="schedule",
            recorded_at=datetime(2026, 11, 29, 18, 5, 10, 400000, tzinfo=UTC),
        ),
    ]
    assert schedule.preview is None  # not asked for
    assert not msgspec.json.decode(msgspec.json.encode(schedule)).get("added_by_a_later_server")


def test_get_schedule_quotes_the_name_and_asks_for_a_preview(call: Callable[..., Any]) -> None:
    times = ["2026-12-01T18:00:00.000Z", "2026-12-02T18:00:00.000Z"]
    fake = FakeOrbit(ok(SCHEDULE), ok(schedule_json(preview=times)))

    call(fake, "get_schedule", "a/b?c")
    assert fake.last.method == "GET"
    assert fake.last.url.raw_path == b"/v1/schedules/a%2Fb%3Fc"
    assert fake.last.url.query == b""
    schedule = call(fake, "get_schedule", "nightly-report", preview=2)
    assert dict(fake.last.url.params) == {"preview": "2"}
    assert schedule.preview == [
        datetime(2026, 12, 1, 18, tzinfo=UTC),
        datetime(2026, 12, 2, 18, tzinfo=UTC),
    ]


def test_list_schedules_reads_one_page(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"items": [schedule_json(name="a")], "next_cursor": "c2"}))

    page = call(fake, "list_schedules", limit=1, cursor="c1")

    assert (fake.last.method, fake.last.url.path) == ("GET", "/v1/schedules")
    assert dict(fake.last.url.params) == {"limit": "1", "cursor": "c1"}
    assert isinstance(page, SchedulePage)
    assert ([s.name for s in page.items], page.next_cursor) == (["a"], "c2")
    call(fake, "list_schedules")
    assert fake.last.url.query == b""


def pages() -> FakeOrbit:
    return FakeOrbit(
        ok({"items": [schedule_json(name="a"), schedule_json(name="b")], "next_cursor": "c1"}),
        ok({"items": [], "next_cursor": "c2"}),  # an empty page with a cursor: keep going
        ok({"items": [schedule_json(name="c")], "next_cursor": None}),
    )


def test_iter_schedules_follows_cursors() -> None:
    fake = pages()
    with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        schedules: Iterator[Schedule] = client.iter_schedules(limit=2)
        assert fake.requests == []  # lazy
        names = [schedule.name for schedule in schedules]

    assert names == ["a", "b", "c"]
    assert [r.url.params.get("cursor") for r in fake.requests] == [None, "c1", "c2"]
    assert {r.url.params["limit"] for r in fake.requests} == {"2"}


async def test_async_iter_schedules_follows_cursors() -> None:
    fake = pages()
    async with AsyncClient.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
        names = [schedule.name async for schedule in client.iter_schedules(cursor="c0")]

    assert names == ["a", "b", "c"]
    assert [r.url.params["cursor"] for r in fake.requests] == ["c0", "c1", "c2"]


# --- update and delete ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "body"),
    [
        ({}, {}),
        ({"cron": "0 3 * * *", "version": 4}, {"cron": "0 3 * * *", "version": 4}),
        ({"interval_ms": 60_000}, {"interval_ms": 60000}),
        (
            {"timezone": "Europe/Berlin", "catchup": "skip", "catchup_max": 5, "overlap": "allow"},
            {"timezone": "Europe/Berlin", "catchup": "skip", "catchup_max": 5, "overlap": "allow"},
        ),
        (
            {"task": ScheduleTask(queue="reports", type="build", priority=2)},
            {"task": {"queue": "reports", "type": "build", "priority": 2}},
        ),
        ({"task": {"queue": "q", "type": "t"}}, {"task": {"queue": "q", "type": "t"}}),
        ({"start_at": None, "end_at": None}, {"start_at": None, "end_at": None}),
        (
            {"start_at": datetime(2027, 1, 1, tzinfo=UTC), "end_at": "2028-01-01T00:00:00Z"},
            {"start_at": "2027-01-01T00:00:00Z", "end_at": "2028-01-01T00:00:00Z"},
        ),
        (
            {"version": None, "cron": None, "timezone": None, "task": None, "overlap": None},
            {},
        ),
    ],
)
def test_update_schedule_sends_only_the_given_fields(
    call: Callable[..., Any], options: dict[str, Any], body: dict[str, Any]
) -> None:
    fake = FakeOrbit(ok(schedule_json(version=2)))

    schedule = call(fake, "update_schedule", "nightly report", **options)

    assert (fake.last.method, fake.last.url.raw_path) == (
        "PATCH",
        b"/v1/schedules/nightly%20report",
    )
    assert fake.body() == body
    assert fake.last.headers["Content-Type"] == "application/json"
    assert schedule.version == 2


def test_delete_schedule_reads_the_empty_answer(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(httpx2.Response(204))

    assert call(fake, "delete_schedule", "nightly-report") is None
    assert (fake.last.method, fake.last.url.path, fake.last.content) == (
        "DELETE",
        "/v1/schedules/nightly-report",
        b"",
    )


# --- pause, resume, trigger ----------------------------------------------------------------


def test_pause_sends_a_body_only_with_a_reason(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(schedule_json(paused=True, paused_reason="migration")))

    call(fake, "pause_schedule", "nightly-report")
    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/schedules/nightly-report/pause")
    assert fake.last.content == b""
    assert "Content-Type" not in fake.last.headers
    schedule = call(fake, "pause_schedule", "nightly-report", reason="migration")
    assert fake.body() == {"reason": "migration"}
    assert (schedule.paused, schedule.paused_reason) == (True, "migration")


def test_resume_posts_without_a_body(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(SCHEDULE))

    schedule = call(fake, "resume_schedule", "nightly-report")

    assert (fake.last.method, fake.last.url.path, fake.last.content) == (
        "POST",
        "/v1/schedules/nightly-report/resume",
        b"",
    )
    assert schedule.paused is False


def test_trigger_reads_the_fire_it_made(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(FIRE, 201))

    fire = call(fake, "trigger_schedule", "nightly-report")

    assert (fake.last.method, fake.last.url.path, fake.last.content) == (
        "POST",
        "/v1/schedules/nightly-report/trigger",
        b"",
    )
    assert fire == ScheduleFire(
        fire_time=datetime(2026, 11, 30, 9, 15, 2, 118000, tzinfo=UTC),
        task_id="01m8kqa2vb",
        outcome="fired",
        cause="trigger",
        recorded_at=datetime(2026, 11, 30, 9, 15, 2, 118000, tzinfo=UTC),
    )


# --- backfill ------------------------------------------------------------------------------


def test_backfill_sends_from_and_to(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(BACKFILL, 202))
    start = datetime(2026, 11, 1, 8, tzinfo=timezone(timedelta(hours=8)))

    backfill = call(fake, "backfill_schedule", "nightly-report", start, "2026-11-08T00:00:00Z")

    assert (fake.last.method, fake.last.url.path) == (
        "POST",
        "/v1/schedules/nightly-report/backfill",
    )
    assert fake.body() == {"from": "2026-11-01T08:00:00+08:00", "to": "2026-11-08T00:00:00Z"}
    assert isinstance(backfill, Backfill)
    assert (backfill.id, backfill.schedule, backfill.state) == (
        "bkf_01m8kqb7",
        "nightly-report",
        "running",
    )
    assert (backfill.start, backfill.end) == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 11, 8, tzinfo=UTC),
    )
    assert (backfill.cursor, backfill.fired, backfill.existing, backfill.finished_at) == (
        None,
        0,
        0,
        None,
    )


def test_a_naive_backfill_range_is_refused_before_sending(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok(BACKFILL, 202))
    aware = datetime(2026, 11, 8, tzinfo=UTC)

    with pytest.raises(ValueError, match="start must be timezone-aware"):
        call(fake, "backfill_schedule", "s", datetime(2026, 11, 1), aware)
    with pytest.raises(ValueError, match="end must be timezone-aware"):
        call(fake, "backfill_schedule", "s", aware, datetime(2026, 11, 9))
    assert fake.requests == []


def test_get_backfill_quotes_both_segments(call: Callable[..., Any]) -> None:
    done = {
        **BACKFILL,
        "state": "done",
        "cursor": "2026-11-07T18:00:00.000Z",
        "fired": 5,
        "existing": 2,
        "finished_at": "2026-11-30T09:20:01.250Z",
    }
    fake = FakeOrbit(ok(done))

    backfill = call(fake, "get_backfill", "daily/eu", "bkf 1")

    assert (fake.last.method, fake.last.url.raw_path) == (
        "GET",
        b"/v1/schedules/daily%2Feu/backfills/bkf%201",
    )
    assert (backfill.state, backfill.fired, backfill.existing) == ("done", 5, 2)
    assert backfill.cursor == datetime(2026, 11, 7, 18, tzinfo=UTC)
    assert backfill.finished_at == datetime(2026, 11, 30, 9, 20, 1, 250000, tzinfo=UTC)


def test_list_backfills_reads_every_item(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"items": [{**BACKFILL, "id": "b2"}, BACKFILL], "next_cursor": None}))

    backfills = call(fake, "list_backfills", "nightly-report")

    assert (fake.last.method, fake.last.url.path) == (
        "GET",
        "/v1/schedules/nightly-report/backfills",
    )
    assert [b.id for b in backfills] == ["b2", "bkf_01m8kqb7"]


# --- the ledger ----------------------------------------------------------------------------


def test_schedule_fires_reads_a_page_of_the_ledger(call: Callable[..., Any]) -> None:
    skipped = {**FIRE, "task_id": None, "outcome": "skipped", "cause": "schedule"}
    fake = FakeOrbit(ok({"items": [FIRE, skipped], "next_cursor": "f2"}))

    page = call(fake, "schedule_fires", "nightly-report", limit=2, cursor="f1")

    assert (fake.last.method, fake.last.url.path) == (
        "GET",
        "/v1/schedules/nightly-report/fires",
    )
    assert dict(fake.last.url.params) == {"limit": "2", "cursor": "f1"}
    assert isinstance(page, FirePage)
    assert [(f.outcome, f.task_id) for f in page.items] == [
        ("fired", "01m8kqa2vb"),
        ("skipped", None),
    ]
    assert page.next_cursor == "f2"


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "method", "args", "kwargs", "error"),
    [
        (NOT_FOUND, "get_schedule", ("nope",), {}, NotFoundError),
        (NOT_FOUND, "delete_schedule", ("nope",), {}, NotFoundError),
        (NOT_FOUND, "get_backfill", ("s", "b"), {}, NotFoundError),
        (
            (409, "already_exists", "conflict"),
            "create_schedule",
            ("nightly-report",),
            {"task": {"queue": "q", "type": "t"}, "cron": "0 3 * * *"},
            ConflictError,
        ),
        (
            (409, "state_conflict", "conflict"),
            "update_schedule",
            ("nightly-report",),
            {"version": 3, "cron": "0 3 * * *"},
            StateConflictError,
        ),
        (
            (400, "invalid_request", "protocol"),
            "create_schedule",
            ("s",),
            {"task": {"queue": "q", "type": "t"}, "cron": "61 * * * *"},
            ProtocolError,
        ),
        (
            (403, "forbidden", "permission"),
            "trigger_schedule",
            ("s",),
            {},
            PermissionDeniedError,
        ),
    ],
)
def test_errors_arrive_typed(
    call: Callable[..., Any],
    answer: tuple[int, str, str],
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[OrbitError],
) -> None:
    with pytest.raises(error) as raised:
        call(FakeOrbit(failure(*answer)), method, *args, **kwargs)
    assert type(raised.value) is error  # the closest class, not only a base of it
    assert (raised.value.status, raised.value.code) == answer[:2]


def test_an_answer_of_the_wrong_shape_is_an_unexpected_response(call: Callable[..., Any]) -> None:
    fake = FakeOrbit(ok({"name": "nightly-report"}))

    with pytest.raises(OrbitError) as raised:
        call(fake, "get_schedule", "nightly-report")
    assert raised.value.code == "unexpected_response" and raised.value.status == 200
    assert "missing required field" in raised.value.message


@pytest.mark.parametrize(
    ("method", "args"),
    [("get_schedule", ("",)), ("delete_schedule", ("",)), ("get_backfill", ("s", ""))],
)
def test_empty_names_and_ids_are_refused(
    call: Callable[..., Any], method: str, args: tuple[str, ...]
) -> None:
    fake = FakeOrbit(ok(SCHEDULE))

    with pytest.raises(ValueError, match="empty"):
        call(fake, method, *args)
    assert fake.requests == []
