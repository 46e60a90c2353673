"""Schedules over HTTP at the ends of the calendar, with backfill limits, and with bodies of the
wrong types: every answer is a 400 with a reason, or a shortened preview, never a 500 (issue 17:
H2, M6, M7, L4)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from orbit_server.api.app import OrbitApp
from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from orbit_server.store import Database
from tests.api.test_error_contract import assert_error
from tests.api.test_schedules_api import NIGHTLY
from tests.conftest import SCOPE, bearer, make_key

TICK: dict[str, Any] = {**NIGHTLY, "name": "tick", "cron": None, "interval_ms": 1000}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"start_at": "0001-01-01T00:00:00+14:00"}, "start_at must be from 1970-01-01T00:00:00Z"),
        ({"start_at": "9999-12-30T00:00:00Z", "timezone": "Pacific/Kiritimati"}, "start_at"),
        ({"start_at": "9999-12-31T23:59:59.999Z", "cron": None, "interval_ms": 1000}, "start_at"),
        ({"end_at": "1969-12-31T23:59:59Z"}, "end_at must be"),
        ({"end_at": "9999-12-31T23:59:59.999999Z"}, "before 9999-01-01T00:00:00Z"),
    ],
)
async def test_times_outside_the_calendar_answer_400(
    http: httpx2.AsyncClient, node: Node, change: dict[str, Any], words: str
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    answer = await http.post("/v1/schedules", json={**NIGHTLY, **change}, headers=operator)
    assert_error(answer, 400, "invalid_request", "protocol")
    assert words in answer.json()["error"]["message"]
    await http.post("/v1/schedules", json=NIGHTLY, headers=operator)
    patched = await http.patch("/v1/schedules/nightly-report", json=change, headers=operator)
    assert_error(patched, 400, "invalid_request", "protocol")


async def test_near_the_end_a_schedule_has_the_slots_there_are(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    rare = {**NIGHTLY, "name": "rare", "cron": "0 0 * 2 1#5", "start_at": "9990-01-01T00:00:00Z"}
    created = await http.post("/v1/schedules", json=rare, headers=operator)
    assert created.status_code == 201, created.text
    assert created.json()["next_fire_at"] is None  # no fifth Monday of February before 9999
    read = await http.get("/v1/schedules/rare?preview=100", headers=operator)
    assert (read.status_code, read.json()["preview"]) == (200, [])
    last = {**TICK, "name": "last", "start_at": "9998-12-31T23:59:57.999Z"}
    assert (await http.post("/v1/schedules", json=last, headers=operator)).status_code == 201
    read = await http.get("/v1/schedules/last?preview=100", headers=operator)
    assert read.status_code == 200
    assert read.json()["preview"] == [
        "9998-12-31T23:59:57.999Z", "9998-12-31T23:59:58.999Z", "9998-12-31T23:59:59.999Z",
    ]  # fmt: skip
    kiritimati = {
        **NIGHTLY, "name": "kiritimati", "timezone": "Pacific/Kiritimati",
        "start_at": "9998-12-30T00:00:00Z",
    }  # fmt: skip
    assert (await http.post("/v1/schedules", json=kiritimati, headers=operator)).status_code == 201
    read = await http.get("/v1/schedules/kiritimati?preview=100", headers=operator)
    assert len(read.json()["preview"]) == 2  # 02:00 on the 31st and 1 January are the last


async def test_a_backfill_outside_the_calendar_or_too_long_answers_400_with_the_count(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    minutely = {**NIGHTLY, "name": "minutely", "cron": "* * * * *", "timezone": "UTC"}
    await http.post("/v1/schedules", json=minutely, headers=operator)
    ancient = await http.post(
        "/v1/schedules/minutely/backfill",
        json={"from": "0001-01-01T00:00:00Z", "to": "0001-01-02T00:00:00Z"},
        headers=operator,
    )
    assert_error(ancient, 400, "invalid_request", "protocol")
    assert ancient.json()["error"]["details"] == {"field": "from"}
    seconds = {**NIGHTLY, "name": "seconds", "cron": "* * * * * *", "paused": True}
    await http.post("/v1/schedules", json=seconds, headers=operator)
    long = await http.post(
        "/v1/schedules/seconds/backfill",
        json={"from": "2000-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
        headers=operator,
    )
    assert_error(long, 400, "invalid_request", "protocol")
    details = long.json()["error"]["details"]
    assert details == {"slots": 10_001, "exact": False, "max_slots": 10_000}
    listed = await http.get("/v1/schedules/seconds/backfills", headers=operator)
    assert listed.json()["items"] == []
    schedule = (await http.get("/v1/schedules/seconds", headers=operator)).json()
    assert schedule["failure"] is None


async def test_a_backfill_counts_against_the_keys_submit_rate(
    db: Database, clock: FakeClock
) -> None:
    settings = Settings.load(
        environ={}, flags={"submit_rate_per_key": 1, "submit_burst_per_key": 5}
    )
    node = await build_node(settings, db=db, clock=clock)
    transport = httpx2.ASGITransport(app=OrbitApp(node))
    async with httpx2.AsyncClient(transport=transport, base_url="http://orbit.test") as http:
        operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
        minutely = {**NIGHTLY, "name": "minutely", "cron": "* * * * *", "timezone": "UTC"}
        await http.post("/v1/schedules", json=minutely, headers=operator)
        span = {"from": "2029-12-31T23:00:00Z", "to": "2029-12-31T23:06:00Z"}  # 6 slots
        too_many = await http.post("/v1/schedules/minutely/backfill", json=span, headers=operator)
        assert_error(too_many, 400, "invalid_request", "protocol")
        assert too_many.json()["error"]["details"] == {"slots": 6, "burst": 5}
        five = {"from": "2029-12-31T23:00:00Z", "to": "2029-12-31T23:05:00Z"}
        first = await http.post("/v1/schedules/minutely/backfill", json=five, headers=operator)
        assert first.status_code == 202, first.text
        again = await http.post("/v1/schedules/minutely/backfill", json=five, headers=operator)
        assert_error(again, 429, "rate_limited", "transient")
        assert again.headers["retry-after"] == "5"


async def test_schedule_bodies_of_the_wrong_types_are_refused(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    for change in (
        {"paused": 0},
        {"catchup_max": "10"},
        {"cron": None, "interval_ms": "60000"},
        {"cron": None, "interval_ms": 60000.0},
        {"start_at": 0},
        {"timezone": 8},
        {"task": {"queue": "q", "type": "t", "priority": "1"}},
    ):
        answer = await http.post("/v1/schedules", json={**NIGHTLY, **change}, headers=operator)
        assert_error(answer, 400, "invalid_request", "protocol")
    assert (await http.get("/v1/schedules", headers=operator)).json()["items"] == []
    await http.post("/v1/schedules", json=NIGHTLY, headers=operator)
    for path, body in (
        ("", {"version": "1"}),
        ("", {"end_at": 1_900_000_000}),
        ("", {"catchup_max": True}),
        ("/pause", {"reason": 5}),
        ("/backfill", {"from": 0, "to": "2029-12-31T00:00:00Z"}),
        ("/backfill", {"from": "2029-12-30T00:00:00Z", "to": 1_893_369_600}),
    ):
        method = http.patch if not path else http.post
        answer = await method(f"/v1/schedules/nightly-report{path}", json=body, headers=operator)
        assert_error(answer, 400, "invalid_request", "protocol")
    schedule = (await http.get("/v1/schedules/nightly-report", headers=operator)).json()
    assert (schedule["version"], schedule["paused"]) == (1, False)
    listed = await http.get("/v1/schedules/nightly-report/backfills", headers=operator)
    assert listed.json()["items"] == []
